"""``memjobs import-gateway``: a single-host gateway's folders (USER.md /
MEMORY.md per user, a knowledge folder with consent) become the owners'
documents through the memory service and the reindex path; a document holding
a secret is refused and reported, the others imported; a second run changes
nothing and says so."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from memjobs_client.contracts import QUEUE_KNOWLEDGE, owner_key
from memjobs_worker.cli import exits
from memjobs_worker.ops.gateway_import import blocks
from memjobs_worker.settings import Settings
from tests.support.cli import SECRET, cli_env, run_cli
from tests.support.harness import Harness, worker_env

LIN, WEN = "gateway-user-lin", "gateway-user-wen"
USER_MD = "- 叫我小林\n- 回答简短一些\n"
MEMORY_MD = "# 长期记忆\n\n- 住在杭州\n- 女儿的生日是三月三日\n"
NOTE = "Our family doctor is Dr. Wen at the Xixi clinic."


def gateway(root: Path) -> tuple[Path, Path]:
    """The seeds' layout: one folder per user under the memory folder and the knowledge folder."""
    memory, knowledge = root / "memory", root / "knowledge"
    for folder, files in (
        (memory / LIN, {"USER.md": USER_MD, "MEMORY.md": MEMORY_MD, "ASSISTANT.md": "你是 Nova。\n"}),
        (memory / WEN, {"USER.md": "- Call me Wen\n", "MEMORY.md": f"- {SECRET}\n"}),
        (knowledge / LIN, {"doctor.md": NOTE}),
    ):
        folder.mkdir(parents=True)
        for name, text in files.items():
            (folder / name).write_text(text)
    return memory, knowledge


def test_import_gateway_twice_imports_once_refusing_the_file_with_a_secret(
    make_settings: Callable[..., Settings], harness_factory: Callable[[Settings], Harness], tmp_path: Path
) -> None:
    settings = make_settings(knowledge_roots=str(tmp_path))
    h = harness_factory(settings)
    h.start_worker()
    memory, knowledge = gateway(tmp_path / "gateway")
    env = worker_env(settings, MEMJOBS_LOCAL_EMBEDDER="hashing")
    args = ("import-gateway", "--memory-dir", str(memory), "--knowledge-dir", str(knowledge), "--consent", "--json")

    first = run_cli(env, *args)
    assert first.code == exits.REFUSED, str(first)  # one file refused: said in the exit code too
    assert first.json()["totals"] == {"imported": 3, "refused": 1, "skipped": 1, "knowledge queued": 1}
    refused = [d for r in first.json()["results"] for d in r.get("documents", []) if d["outcome"] == "refused"]
    assert refused == [{"doc": "MEMORY.md", "outcome": "refused", "reason": "sensitive_content"}]
    said = first.stdout + first.stderr
    assert SECRET not in said and LIN not in said and WEN not in said  # no secret, no owner id
    assert said.count("owner ") >= 3, first.stderr  # a progress line per owner
    docs = h.runtime.memory_docs
    assert docs.read(LIN, "USER.md").content.strip() == USER_MD.strip()
    assert docs.read(LIN, "MEMORY.md").content.strip() == MEMORY_MD.strip()
    assert docs.read(WEN, "MEMORY.md").content == ""
    versions = {(o, d): docs.read(o, d).version for o in (LIN, WEN) for d in ("USER.md", "MEMORY.md")}
    h.drain()
    assert [d.title for d in h.runtime.knowledge.documents(owner_key(LIN))] == ["doctor.md"]

    second = run_cli(env, *args)
    assert second.code == exits.REFUSED, str(second)
    assert second.json()["totals"] == {"unchanged": 3, "refused": 1, "skipped": 1, "knowledge unchanged": 1}
    assert {(o, d): docs.read(o, d).version for o, d in versions} == versions
    assert h.queues()[QUEUE_KNOWLEDGE]["ready"] == 0  # no second re-index queued


def test_import_gateway_refuses_a_knowledge_folder_without_consent_and_a_folder_of_no_users(tmp_path: Path) -> None:
    memory, knowledge = gateway(tmp_path / "gateway")
    env = cli_env(tmp_path / "data")  # no stack: both are refused before one is needed
    result = run_cli(env, "import-gateway", "--memory-dir", str(memory), "--knowledge-dir", str(knowledge))
    assert result.code == exits.REFUSED and "consent_required" in result.stderr, str(result)
    result = run_cli(env, "import-gateway", "--memory-dir", str(memory / LIN))
    assert result.code == exits.REFUSED, str(result)
    assert "no user folders" in result.stderr and "one folder per user" in result.stderr


def test_a_document_is_cut_into_patches_at_blank_lines() -> None:
    text = "\n\n".join(f"- fact {i} " + "x" * 300 for i in range(7))
    pieces = blocks(text, 1000)
    assert all(len(p) <= 1000 for p in pieces) and len(pieces) == 3
    assert "\n\n".join(pieces) == text
    assert blocks("a" * 2500, 1000) == ["a" * 1000, "a" * 1000, "a" * 500]
    assert blocks("\n\n  \n", 1000) == []
