"""Ordinary voice-assistant lines for the corpus: numbers, prices, dates, orders,
parcels, versions, colours, model settings and harmless talk about passwords,
keys, tokens and codes, in Chinese and English (see ``generate_corpus.py``)."""

from __future__ import annotations

import random
import string

FIXED = """\
how do I reset my password?
I forgot my password again
remind me to change my email password tomorrow
what makes a strong password?
the password must be at least 12 characters long
my password expired, how do I get a new one
is a password manager safe to use
passwords should not be reused across sites
the wifi password is on the back of the router
ask Tom for the wifi password
我忘记密码了
怎么修改支付密码
密码学是一门很有意思的学科
密码锁的电池没电了
请帮我查一下怎么找回密码
密码至少要8位，包含字母和数字
银行卡密码输错三次会被锁吗
验证码收不到怎么办
验证码已发送，请注意查收
验证码60秒后可以重新获取
请输入6位数字验证码
验证码有效期是5分钟
MAX_TOKENS=4096
max_tokens: 2048
input tokens: 15320
output tokens: 812, total tokens: 16132
set max_tokens to 1024 for the summary
the model used 3,200 tokens for that answer
token limit is 128k
prompt_tokens=532 completion_tokens=120
temperature: 0.7, top_p: 0.9
每次调用消耗了大约 1500 个 token
上下文窗口是 32k tokens
the key to good bread is patience
I lost my house keys at the gym
the secret ingredient is cinnamon
can you keep a secret?
my token of appreciation for the team
we need to pin the meeting notes to the channel
the PIN pad at the store was broken
what is the zip code for downtown Seattle
the zip code is 10001
error code is 5003 when I open the app
HTTP status code 404 means not found
the promo code is SPRING2024
use discount code SAVE20 at checkout
the source code is 2048 lines long
area code 415 is San Francisco
the country code for China is 86
取件码 3-2-1024，放在菜鸟驿站
您的快递取件码是 8-2-3317
the dress code is smart casual
QR code on the table links to the menu
I need to write code for the login page
my code is on GitHub under the tests folder
the door is painted colour #3A7BD5
use rgb(255, 87, 51) for the header
背景色改成 #FF5733
python 3.12.4 is installed
upgrade to version 2.31.0
node v20.11.1 and npm 10.2.4
the build number is 20241130.4
commit 8f2a9c1 fixed the crash
release v1.4.0-rc.2 is out
docker image tag 1.25.3-alpine
the meeting moved to 2024-12-05 at 15:30
my flight CA1831 leaves at 08:45
the train G7 departs from platform 12
the temperature tomorrow is 23 degrees
set an alarm for 6:30 am
call mom at 138 1234 5678
her number is +1 (415) 555-0199
office phone 021-6234 5678
the battery is at 87 percent
the lock screen shows the time
you can use face id instead of a passcode
passcode settings are under Face ID & Passcode
two-factor authentication is turned on
I turned on 2FA for my bank account
the OTP never arrived on my phone
verification code didn't arrive, please resend
how long is a verification code valid?
the authenticator app shows a new code every 30 seconds
the API is slow today
our API key rotation policy is every 90 days
store API keys in a secrets manager, not in code
the access token expires after 3600 seconds
refresh tokens are valid for 30 days
password = os.environ["DB_PASSWORD"]
token: ${{ secrets.GITHUB_TOKEN }}
password: <your password here>
DATABASE_URL=postgres://user:password@localhost/db
the ssh key is in the usual place
generate a new ssh key with ssh-keygen
SSH public key fingerprint SHA256:nThbg6kXUpJWGl7E1IGOCspRomTxdCARLviKw6E5SY8
my student id is 20231234
employee number 100234
room 1208 on the 12th floor
I weigh 68 kg and I'm 175 cm tall
the recipe needs 250 g flour and 3 eggs
身份证办理需要15个工作日
我的护照快过期了，下个月要去换
护照照片的尺寸是 33x48 毫米
passport photos must be 35 x 45 mm
I renewed my passport in March
social security office opens at 9
card ending in 4242 was charged
my credit card bill is due on the 15th
信用卡账单日是每月5号
这张卡的额度是 50000 元
the ISBN is 978-7-115-54608-1
IMEI 356938035643809 is on the box
order 4024007134564842 has shipped
tracking number 1Z999AA10123456784
what's the weather like in Hangzhou tomorrow
play some jazz in the living room
add milk, eggs and bread to the shopping list
how many calories are in a banana
translate "good morning" into Japanese
what time is it in New York
turn off the lights in the bedroom
remind me to water the plants every Sunday
book a table for four at 7 pm
how far is the airport from here
the kids' school starts at 8:10
my daughter's birthday is on June 3rd
I paid 1,299 yuan for the headphones
the rent is 4500 a month
the stock closed at 182.35 today
Bitcoin is at 67,000 dollars
the lottery numbers were 3 14 22 35 41 and 7
I scored 98 out of 100 on the test
the car's licence plate is 沪A·12345
my car key fob needs a new battery
the password hint says "first pet"
I'll tell you the password later in person
don't say your password out loud
never share your verification code with anyone
银行不会向你索要验证码
不要把验证码告诉任何人
这个密码箱怎么打开
密码错误次数太多，账户被锁了
请问登录密码和支付密码有什么区别
设置一个安全的密码有哪些技巧
口令这个词是什么意思
令牌桶算法怎么实现限流
秘钥和密钥有什么区别
我想学习公钥密码学
PIN码和密码一样吗
我的卡号尾号是 8832
身份证快到期了，怎么续办
护照办理需要多少钱
wifi 信号不好，帮我重启一下路由器
家里的 Wi-Fi 名字叫 Xiaomi_5G
the wifi network name is Starbucks_Guest
connect to the guest network, it has no password
API 请求超时了，返回 504
请求头里的 Content-Type 是 application/json
session expired after 30 minutes
your session id has been refreshed
the secret santa budget is 200 yuan
口令是什么意思
口令错误，请重新输入
my meeting code is 853 2241
我的淘宝账号是 13800138000
the game code is 4521, join us
my password, it's long and hard to remember
the password? it's on the fridge
密码是6位数字
"""

_ENGLISH = [
    "order #{o} was delivered yesterday",
    "your order number is {o}",
    "tracking number {t} is out for delivery",
    "the parcel {t} is at the pickup station",
    "invoice {o} is due in 30 days",
    "the total is ${p}.{c}",
    "it costs {p} dollars",
    "transaction ref {o}",
    "timestamp {ts}",
    "the server logged {ms} ms at {ts}",
    "call me at 1{ph}",
    "meet me on {d} at {h}:{m}",
    "my flight lands at {h}:{m} on {d}",
    "remind me to pay {p} yuan for the electricity bill",
    "the package weighs {k} kg",
    "turn the thermostat to {k} degrees",
    "version {v1}.{v2}.{v3} fixes the bug",
    "the model answered in {ms} ms using {tk} tokens",
    "max_tokens={tk}",
    "tokens used: {tk}",
    "the meeting id is {mid}",
    "apartment {h}{m}, building {k}",
    "colour code #{hex6}",
    "my membership number is {o}",
    "the case number is {o}",
    "step count today: {tk}",
    "I ran {k} km in {m} minutes",
    "the bus {k} comes every {m} minutes",
    "the population is {o}",
    "set a timer for {m} minutes",
]
_CHINESE = [
    "订单号 {o} 已发货",
    "快递单号 {t} 明天送达",
    "运单号是 {t}",
    "我的订单 {o} 退款了吗",
    "这件衣服 {p} 元",
    "一共花了 {p}.{c} 元",
    "时间戳 {ts}",
    "帮我打电话给 1{ph}",
    "{d} 下午 {h} 点开会",
    "提醒我 {h}:{m} 吃药",
    "今天走了 {tk} 步",
    "明天气温 {k} 度",
    "版本号 {v1}.{v2}.{v3}",
    "发票号码 {o}",
    "会员号 {o}",
    "航班 MU{k}{m} 延误了",
    "房间号 {h}{m}",
    "这次对话用了 {tk} 个 token",
    "工单编号 {o}",
    "流水号 {o} 的交易成功了",
    "包裹重 {k} 公斤",
    "帮我把闹钟设到 {h} 点 {m} 分",
    "快递柜取件码 {k}-{m}-{h}{m}",
    "电费 {p} 元，水费 {c} 元",
    "体重 {k} 公斤，身高 {p} 厘米",
]


def negative_lines(rng: random.Random) -> list[str]:
    """The fixed lines, then templates filled with random numbers (two draws each)."""

    def fill(template: str) -> str:
        return template.format(
            o="".join(rng.choice(string.digits) for _ in range(rng.choice([10, 12, 14, 16, 18, 19]))),
            t=rng.choice(["SF", "YT", "JD", "1Z", ""]) + "".join(rng.choice(string.digits) for _ in range(13)),
            p=rng.randint(5, 9999),
            c=rng.randint(10, 99),
            ts=rng.randint(1_600_000_000, 1_800_000_000),
            ms=rng.randint(20, 9000),
            ph="".join(rng.choice(string.digits) for _ in range(10)),
            d=f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
            h=rng.randint(1, 23),
            m=f"{rng.randint(0, 59):02d}",
            k=rng.randint(2, 99),
            v1=rng.randint(0, 9),
            v2=rng.randint(0, 40),
            v3=rng.randint(0, 30),
            tk=rng.randint(100, 200_000),
            mid="".join(rng.choice(string.digits) for _ in range(9)),
            hex6="".join(rng.choice("0123456789ABCDEF") for _ in range(6)),
        )

    lines = [line for line in FIXED.splitlines() if line.strip()]
    for _ in range(3):
        lines += [fill(t) for t in _ENGLISH + _CHINESE]
    return lines + [line for line in NEAR_MISSES.splitlines() if line.strip()]


# Close to the gaps closed in issue 31 (a bare "key", ATM codes, a password
# described before its digits, words of the BIP39 list): ordinary all the same.
NEAR_MISSES = """the key is under the mat
the key to success is practice 24/7
key: value pairs are kept in a dictionary
press the key F5 to refresh the page
the shortcut key is Ctrl+Shift+S
the key is 2024-12-01 in the calendar
my ATM card expired last week
where is the nearest ATM with no fee
the ATM code of conduct is posted on the wall
我的密码在 2023 年改过
密码长度至少 8 位
密码错误超过 3 次就会锁定
密码是什么来着，我想不起来了
abandon ability able about above absent absorb abstract absurd abuse access accident
we should help each other and keep the garden clean every morning before breakfast
"""
