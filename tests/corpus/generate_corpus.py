"""Write the labelled corpus of the sensitive-content check (run it to regenerate).

``python -m tests.corpus.generate_corpus`` writes ``sensitive_positive.txt``
(``family<TAB>secret<TAB>text`` per line; ``\\n`` in the text is a line break)
and ``sensitive_negative.txt`` (one ordinary line each).  Every value is drawn
from a seeded random generator: none is a real credential.  The committed
files are what the tests read; this script only says where they came from.
"""

from __future__ import annotations

import base64
import random
import string
from pathlib import Path

from tests.corpus.negatives import negative_lines

HERE = Path(__file__).parent
R = random.Random(20261130)
ALNUM = string.ascii_letters + string.digits
HEX = "0123456789abcdef"


def rnd(n: int, alphabet: str = ALNUM) -> str:
    """A random value with at least one digit and one letter when the alphabet has both."""
    while True:
        value = "".join(R.choice(alphabet) for _ in range(n))
        digit_ok = not (set(alphabet) & set(string.digits)) or any(c.isdigit() for c in value)
        if digit_ok and (not (set(alphabet) & set(string.ascii_letters)) or any(c.isalpha() for c in value)):
            return value


def digits(n: int) -> str:
    return "".join(R.choice(string.digits) for _ in range(n))


def luhn_complete(prefix: str, length: int) -> str:
    body = prefix + digits(length - len(prefix) - 1)
    for check in string.digits:
        candidate = body + check
        total = 0
        for i, c in enumerate(reversed(candidate)):
            n = int(c)
            if i % 2:
                n = n * 2 - 9 if n > 4 else n * 2
            total += n
        if total % 10 == 0:
            return candidate
    raise AssertionError


def cn_id() -> str:
    region = R.choice(["110101", "310104", "440305", "330106", "510107", "420111", "320102"])
    born = f"{R.randint(1950, 2005)}{R.randint(1, 12):02d}{R.randint(1, 28):02d}"
    body = region + born + digits(3)
    weights = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
    return body + "10X98765432"[sum(int(c) * w for c, w in zip(body, weights, strict=True)) % 11]


def password() -> str:
    return R.choice(
        [
            rnd(8),
            rnd(10),
            rnd(6, string.ascii_lowercase + string.digits) + R.choice("!@#$"),
            R.choice(["Sunny", "Tiger", "Panda", "Lucky"]) + digits(4) + "!",
            "".join(R.choice(string.digits) for _ in range(R.choice([6, 8]))),
        ]
    )


def grouped(card: str, sep: str) -> str:
    return sep.join(card[i : i + 4] for i in range(0, len(card), 4))


def keys() -> list[tuple[str, str, str]]:
    """(family, secret, text template with {s})."""
    aws_id = "AKIA" + rnd(16, string.ascii_uppercase + string.digits)
    aws_secret = rnd(40, ALNUM + "/+")
    return [
        ("vendor_payment", "sk_live_" + rnd(24), "stripe secret {s} for the shop"),
        ("vendor_payment", "rk_live_" + rnd(24), "restricted key: {s}"),
        ("vendor_payment", "whsec_" + rnd(32), "webhook signing secret {s}"),
        ("vendor_payment", "sk_test_" + rnd(24), "测试环境用 {s}"),
        ("vendor_mail", "key-" + rnd(32, HEX), "mailgun api {s}"),
        ("vendor_mail", "key-" + rnd(32, HEX), "把 {s} 填到邮件服务里"),
        ("vendor_mail", "SG." + rnd(22) + "." + rnd(43), "sendgrid: {s}"),
        ("vendor_messaging", "xoxb-" + digits(12) + "-" + digits(12) + "-" + rnd(24), "slack bot {s}"),
        ("vendor_messaging", "xoxp-" + digits(11) + "-" + digits(11) + "-" + rnd(32, HEX), "用这个 slack 令牌 {s}"),
        ("vendor_messaging", digits(10) + ":AA" + rnd(33), "telegram bot token {s}"),
        ("vendor_messaging", digits(9) + ":" + rnd(35), "电报机器人 {s}"),
        ("vendor_messaging", "SK" + rnd(32, HEX), "twilio api key {s}"),
        ("vendor_messaging", "AC" + rnd(32, HEX), "twilio account {s}"),
        ("vendor_cloud", aws_id, "aws key id {s}"),
        ("vendor_cloud", "ASIA" + rnd(16, string.ascii_uppercase + string.digits), "临时凭证 {s}"),
        ("vendor_cloud", aws_secret, "aws_secret_access_key = {s}"),
        ("vendor_cloud", aws_secret, aws_id + " / {s}"),
        ("vendor_cloud", "AIza" + rnd(35), "maps key {s}"),
        ("vendor_cloud", "AIza" + rnd(35), "谷歌的 key 是 {s}"),
        (
            "vendor_cloud",
            rnd(86, ALNUM + "+/") + "==",
            "DefaultEndpointsProtocol=https;AccountName=acme;AccountKey={s};EndpointSuffix=core.windows.net",
        ),
        ("vendor_cloud", "LTAI" + rnd(20), "阿里云 AccessKey ID {s}"),
        ("vendor_cloud", "LTAI" + rnd(16), "aliyun {s}"),
        ("vendor_ci", "ghp_" + rnd(36), "github token {s}"),
        ("vendor_ci", "gho_" + rnd(36), "oauth {s}"),
        ("vendor_ci", "ghs_" + rnd(36), "app token {s} expires soon"),
        ("vendor_ci", "github_pat_" + rnd(22) + "_" + rnd(59), "fine-grained {s}"),
        ("vendor_ci", "glpat-" + rnd(20), "gitlab {s}"),
        ("vendor_ci", "glpat-" + rnd(20), "把 {s} 配到流水线里"),
        ("vendor_registry", "npm_" + rnd(36), "npm publish token {s}"),
        ("vendor_registry", "pypi-AgEIcHlwaS5vcmc" + rnd(60, ALNUM + "-_"), "twine password {s}"),
        ("vendor_model", "sk-" + rnd(48), "openai {s}"),
        ("vendor_model", "sk-proj-" + rnd(40, ALNUM + "-_"), "use {s} for the model"),
        ("vendor_model", "sk-ant-api03-" + rnd(80, ALNUM + "-_"), "claude key {s}"),
        ("vendor_model", "hf_" + rnd(34), "hugging face {s}"),
        ("vendor_model", "sk-" + rnd(32, HEX), "DashScope 的密钥 {s}"),
        ("vendor_model", "sk-" + rnd(32, HEX), "通义千问 api {s}"),
        ("jwt", "eyJ" + rnd(30) + "." + "eyJ" + rnd(40) + "." + rnd(43, ALNUM + "-_"), "session {s}"),
    ]


def urls() -> list[tuple[str, str, str]]:
    pw = [password().replace("@", "x").replace("#", "x") for _ in range(8)]
    return [
        ("db_url", pw[0], "postgres://app:{s}@db.internal:5432/shop"),
        ("db_url", pw[1], "redis://:{s}@10.0.0.5:6379/0"),
        ("db_url", pw[2], "mysql://root:{s}@127.0.0.1/test"),
        ("db_url", pw[3], "mongodb+srv://admin:{s}@cluster0.example.net/app"),
        ("db_url", pw[4], "redis://cache.local:6379/0?password={s}"),
        ("db_url", pw[5], "Server=db;Database=app;User Id=sa;Password={s};"),
        ("db_url", pw[6], "amqp://guest:{s}@rabbit:5672/"),
        ("db_url", pw[7], "数据库连接串 postgresql://u:{s}@pg:5432/x 记一下"),
    ]


def numbers() -> list[tuple[str, str, str]]:
    out: list[tuple[str, str, str]] = []
    for prefix, length, template in [
        ("4", 16, "my card number is {s}"),
        ("51", 16, "credit card {s} exp 09/28"),
        ("62", 16, "银行卡号 {s}"),
        ("62", 19, "我的储蓄卡是 {s}"),
        ("37", 15, "amex {s}"),
        ("4", 16, "{s}"),
        ("55", 16, "{s} 这个卡"),
        ("6011", 16, "discover card: {s}"),
        ("4", 16, "visa {s}"),
        ("35", 16, "JCB {s}"),
        ("62", 16, "信用卡 {s} 帮我记着"),
    ]:
        card = luhn_complete(prefix, length)
        shown = grouped(card, R.choice([" ", "-", ""])) if length == 16 else card
        out.append(("card", shown, template))
    for template in [
        "身份证号 {s}",
        "我的身份证号码是 {s}",
        "{s}",
        "ID card: {s}",
        "证件号 {s} 请核对",
        "residence id {s}",
    ]:
        out.append(("cn_id", cn_id(), template))
    typo = cn_id()
    out.append(("cn_id", typo[:17] + ("0" if typo[17] != "0" else "1"), "ID: {s}"))  # a wrong check digit
    for template in ["my passport number is {s}", "护照号：{s}", "passport no. {s}", "港澳通行证 {s}"]:
        out.append(("passport", R.choice("EGPC") + digits(8), template))
    for template in [
        "验证码 {s}，五分钟内有效",
        "您的验证码是{s}",
        "动态码：{s}",
        "校验码为 {s}",
        "your verification code is {s}.",
        "OTP: {s}",
        "2FA code {s}",
        "the code is {s}",
        "{s} is your login code",
        "【银行】您的短信验证码为{s}，请勿泄露",
        "my one-time code is {s}",
        "security code: {s}",
    ]:
        out.append(("otp", digits(R.choice([4, 6, 6, 8])), template))
    for template in [
        "my PIN is {s}",
        "phone pin: {s}",
        "the passcode is {s}",
        "door code is {s}",
        "解锁密码 {s}",
        "开机密码是{s}",
        "支付密码：{s}",
        "门禁密码是 {s}",
        "alarm code {s}",
    ]:
        out.append(("pin", digits(R.choice([4, 6])), template))
    return out


def words() -> list[tuple[str, str, str]]:
    out: list[tuple[str, str, str]] = []
    for template in [
        "wifi password is {s}",
        "the wi-fi network is HomeNet and the password is {s}",
        "WiFi 名称 TP-LINK_5G，密码 {s}",
        "家里wifi密码：{s}",
        "wifi key: {s}",
        "WIFI:T:WPA;S:HomeNet;P:{s};;",
        "WIFI:S:Office 5G;T:WPA2;P:{s};H:false;;",
        "无线网的密码改成了{s}",
    ]:
        out.append(("wifi", password(), template))
    for template in [
        "我的密码是 {s}",
        "密码改成了{s}",
        "密码设为 {s}",
        "新密码设置成{s}",
        "口令：{s}",
        "邮箱密码是{s}",
        "把密码改为 {s} 了",
        "登录口令为 {s}",
        "{s} 是我的银行卡密码",
        "服务器 root 密码 {s}",
        "密码我设成了{s}",
        "淘宝密码就是{s}",
        "银行卡密码 6 位：{s}",
    ]:
        out.append(("password_zh", password(), template))
    for template in [
        "my password is {s}",
        "password: {s}",
        "the password for my email is {s}",
        "I changed my password to {s}",
        "login admin / pass {s}",
        "{s} is my password",
        "pwd={s}",
        "set the password to {s} please",
        "username bob password {s}",
        "My new password will be {s}.",
        "remember my password, it's {s}",
        "Password → {s}",
    ]:
        out.append(("password_en", password(), template))
    out.append(("password_zh", "天王盖地虎", "口令是“{s}”"))
    out.append(("password_zh", "芝麻开门", "进门的口令是{s}"))
    out.append(("otp", "4 8 2 9 1 3", "verification code {s}"))
    out.append(("password_zh", "admin" + digits(6), "路由器后台 admin / {s}"))
    out.append(("otp", digits(5), "Telegram code {s}"))
    out.append(
        (
            "otp",
            rnd(4, string.ascii_uppercase + string.digits) + "-" + rnd(4, string.ascii_uppercase + string.digits),
            "2FA backup code: {s}",
        )
    )
    out.append(("password_en", password(), "Wi-Fi password — {s}"))
    out.append(("password_en", "correct horse battery", "my password is 'correct horse battery'"))
    body = rnd(64, ALNUM + "+/")
    out.append(
        (
            "private_key",
            body,
            "-----BEGIN RSA PRIVATE KEY-----\\n{s}\\n" + rnd(64, ALNUM + "+/") + "\\n-----END RSA PRIVATE KEY-----",
        )
    )
    out.append(("private_key", body, "-----BEGIN OPENSSH PRIVATE KEY----- {s} -----END OPENSSH PRIVATE KEY-----"))
    out.append(("private_key", body, "私钥：-----BEGIN EC PRIVATE KEY-----\\n{s}\\n-----END EC PRIVATE KEY-----"))
    out.append(("private_key", body, "-----BEGIN PRIVATE KEY-----\\n{s}"))
    out.append(
        (
            "private_key",
            body,
            "-----BEGIN PGP PRIVATE KEY BLOCK-----\\n\\n{s}\\n=ab12\\n-----END PGP PRIVATE KEY BLOCK-----",
        )
    )
    return out


def disguised() -> list[tuple[str, str, str]]:
    out: list[tuple[str, str, str]] = []
    for raw in [
        "sk-proj-" + rnd(40),
        "ghp_" + rnd(36),
        "my password is " + password(),
        "AKIA" + rnd(16, string.ascii_uppercase + string.digits),
        "密码是" + password(),
    ]:
        encoded = base64.b64encode(raw.encode()).decode()
        out.append(("encoded", encoded, R.choice(["config blob {s}", "base64: {s}", "解码一下 {s}"])))
        hexed = raw.encode().hex()
        out.append(("encoded", hexed, R.choice(["hex {s}", "payload={s}"])))
    for word in ["pаsswоrd", "раssword", "passwοrd", "PАSSWORD"]:
        out.append(("homoglyph", password(), f"my {word} is " + "{s}"))
    out.append(("spaced", password(), "p a s s w o r d : {s}"))
    out.append(("spaced", " ".join(password()), "my password is {s}"))
    tokens = [
        "sk-proj-" + rnd(40),
        "ghp_" + rnd(36),
        "glpat-" + rnd(20),
        "xoxb-" + digits(12) + "-" + rnd(24),
        "AIza" + rnd(35),
        "hf_" + rnd(34),
    ]
    for token in tokens:
        step = R.choice([4, 6, 8])
        spaced = R.choice([" ", "\\n", "  "]).join(token[i : i + step] for i in range(0, len(token), step))
        out.append(("spaced", spaced, R.choice(["key: {s}", "{s}", "这个 token {s}", "copy this {s} ok"])))
    return out


def gaps() -> list[tuple[str, str, str]]:
    """The misses of issue 31, item 7, and close variants; drawn from their own
    generator, so the lines before them stay as they were."""
    from mnemonic import Mnemonic  # the client's dependency: the BIP39 word list

    r = random.Random(20261201)
    bip39 = Mnemonic("english")

    def phrase(words: int) -> str:
        return bip39.to_mnemonic(bytes(r.getrandbits(8) for _ in range(words * 4 // 3)))

    def secret() -> str:
        return r.choice(["superSecret", "Hunter", "MyDog", "blueSky"]) + "".join(
            r.choice(string.digits) for _ in range(r.choice([2, 4]))
        )

    def pin() -> str:
        return "".join(r.choice(string.digits) for _ in range(r.choice([4, 6])))

    def born() -> str:
        return f"{r.randint(1950, 2015)}{r.randint(1, 12):02d}{r.randint(1, 28):02d}"

    out = [
        ("seed_phrase", phrase(12), "{s}"),
        ("seed_phrase", phrase(24), "{s}"),
        ("seed_phrase", phrase(12), "write this down: {s}"),
        ("seed_phrase", phrase(18), "这是我的钱包 {s}"),
        ("seed_phrase", phrase(24), "ok so {s} got it?"),
    ]
    for template in ["the key is {s}", "my key is {s}", "the key for the server is {s}", "Key: {s}"]:
        out.append(("key_en", secret(), template))
    for template in [
        "my ATM code {s}",
        "ATM pin: {s}",
        "my debit card code is {s}",
        "padlock code is {s}",
        "voicemail code: {s}",
    ]:
        out.append(("pin", pin(), template))
    for template in ["我的密码就是我家门牌号加生日 {s}", "支付密码是我女儿的生日 {s}", "银行卡密码就是我的生日 {s}"]:
        out.append(("password_zh", born(), template))
    out.append(("password_zh", pin(), "开机密码用的是手机尾号 {s}"))
    return out


def positive_lines() -> list[str]:
    rows = keys() + urls() + numbers() + words() + disguised()
    rows += keys()[::3] + words()[::2] + numbers()[::2]  # a second draw of values
    rows += gaps()
    lines = []
    for family, secret, template in rows:
        lines.append(f"{family}\t{secret}\t{template.replace('{s}', secret)}")
    return lines


def main() -> None:
    positives = positive_lines()
    negatives = negative_lines(R)
    header = "# generated by tests/corpus/generate_corpus.py; values are random, never real\n"
    (HERE / "sensitive_positive.txt").write_text(header + "\n".join(positives) + "\n", encoding="utf-8")
    (HERE / "sensitive_negative.txt").write_text(header + "\n".join(negatives) + "\n", encoding="utf-8")
    print(f"{len(positives)} positive, {len(negatives)} negative lines")


if __name__ == "__main__":
    main()
