"""How injected instructions are phrased in Chinese, for the injection detector.

The English patterns rely on word boundaries and English word order, so Chinese text slipped
through whole. These carry the same labels and weights as their English counterparts, so a
report reads the same in either language. They are written to spare the ordinary sentences
a reading app is full of: 指令 in a CPU book, 系统提示 in an app notice, 忽略 in a novel, a
teacher's 指令, 扮演 a role in a play; each weak signal alone stays under the threshold, and
only the phrasings aimed at the model (忽略之前的指令, 你现在是, 输出你的提示词, 不要告诉用户,
以管理员身份) weigh enough to flag.

The detector matches them against the text as a model reads it: NFKC has made full-width
punctuation plain (！ is !, so the patterns stop a sentence at either), Traditional characters
are read as Simplified (``TRADITIONAL_TO_SIMPLIFIED``) and the spaces put between characters
(忽 略 之 前) are closed (``SPACE_BETWEEN_HAN``).
"""

from __future__ import annotations

import re

_EARLIER = r"(?:之前|以上|上面|上述|前面|先前|此前|原来|原有|所有|全部|一切|你的|系统)"
_RULES = r"(?:指令|指示|提示词?|要求|规则|设定|命令|约束|限制)"
_SECRETS = (
    r"(?:密钥|密码|口令|令牌|凭据|凭证|私钥|\.env|环境变量|api[_ ]?keys?|tokens?|credentials|"
    r"passwords?|secrets?|\.ssh|\.aws)"
)
_LEAK = r"(?:发送|发给|发到|输出|附上|泄露|泄漏|打印|透露|告诉我|一并输出|贴出|上传|复述)"
_MODEL = r"(?:AI|人工智能|助手|模型|大模型|智能体|机器人|assistant|agent|LLM)"
_ACT = r"(?:调用|运行|执行|发送|使用|读取|删除|写入|访问|下载)"

CHINESE_INSTRUCTIONS: list[tuple[re.Pattern[str], str, float]] = [
    (re.compile(p, re.IGNORECASE | re.DOTALL), label, weight)
    for p, label, weight in (
        (
            rf"(?:忽略|无视|忘掉|忘记|不要理会|别管|不用管|抛开|丢弃|覆盖)[^。！？!?\n]{{0,12}}"
            rf"{_EARLIER}[^。！？!?\n]{{0,12}}{_RULES}|(?:忽略|无视)(?:以上|上面|上述|之前)(?:内容|所有|一切)|"
            # The other order: "不管之前的设定是什么，都请忽略它们".
            rf"{_EARLIER}的?{_RULES}[^。！？!?\n]{{0,12}}(?:忽略|无视|不用管|别管|抛开)",
            "asks to ignore instructions",
            1.0,
        ),
        (
            r"你现在是|你不再是|从现在(?:开始|起)[，,]?\s*你(?:是|要|将|必须|只)|现在起你是|"
            r"假装你是|扮演[^。！？!?\n]{0,12}(?:助手|人工智能|AI|模型|机器人)",
            "tries to change the assistant's role",
            0.6,
        ),
        (
            r"(?:新的|最新的?|更新的?|真正的|实际的|隐藏的?)(?:系统)?(?:指令|提示词|任务)",
            "announces new instructions",
            0.6,
        ),
        (
            r"系统提示词|(?:你的|隐藏的?)(?:提示词|系统指令)|开发者模式|越狱|DAN",
            "talks about the prompt",
            0.5,
        ),
        (
            rf"(?:{_LEAK}|显示|重复)出?(?:你的)?(?:完整的?|全部的?)?(?:系统)?(?:提示词|指令|设定)|"
            rf"把你的[^。！？!?\n]{{0,8}}(?:提示词|系统指令|设定)[^。！？!?\n]{{0,10}}(?:{_LEAK}|重复|显示)",
            "asks to reveal its instructions",
            0.6,
        ),
        (
            r"(?:不要|别|切勿|不得|不能)(?:告诉|告知|提醒|透露给|通知|让)[^。！？!?\n]{0,10}(?:用户|使用者|人类|主人)",
            "asks to hide something from the user",
            0.8,
        ),
        (
            r"(?:发送|发到|发给|上传|转发|提交|泄露|外传|邮件发送|邮寄)[^。！？!?\n]{0,40}"
            r"(?:https?://|@|webhook|服务器)",
            "asks to send data somewhere",
            0.6,
        ),
        (
            rf"{_SECRETS}[^。！？!?\n]{{0,30}}{_LEAK}|{_LEAK}[^。！？!?\n]{{0,30}}{_SECRETS}",
            "asks for secrets",
            0.6,
        ),
        (
            r"以(?:管理员|root|超级用户|系统)(?:身份|权限)|(?:获取|提升|给予)(?:管理员|root)权限",
            "asks for elevated rights",
            0.6,
        ),
        (
            rf"{_MODEL}[^。！？!?\n]{{0,30}}(?:必须|应该|应当|务必|需要|要)(?:立即|马上|立刻|直接)?{_ACT}|"
            rf"(?:立即|马上|立刻|直接)(?:调用|运行|执行)\s*[A-Za-z_]+\s*工具",
            "gives the assistant orders",
            0.8,
        ),
    )
]
CHINESE_INSTRUCTIONS.append(
    (
        re.compile(r"用户\s*[:：].{0,300}(?:助手|AI)\s*[:：]", re.DOTALL),
        "contains a fake dialogue",
        0.6,
    )
)
"""``(pattern, label, weight)``, as the detector's English list."""

CHINESE_ROLE_MARKERS = re.compile(r"^\s*(?:系统|助手|用户|开发者)\s*[:：]", re.MULTILINE)
"""A line that opens as a chat turn: 系统：..."""

TRADITIONAL_TO_SIMPLIFIED = str.maketrans(
    "丟麼們從傳體會刪別則務發髮變員復複實將應開棄當執拋據無顯機權來洩獄環現蓋碼級給統"
    "獲穫規視讓記設訪證訴詞該請讀調貼轉載輸運郵鑰問際隱須鬚馬約類憑內戶隻祇",
    "丢么们从传体会删别则务发发变员复复实将应开弃当执抛据无显机权来泄狱环现盖码级给统"
    "获获规视让记设访证诉词该请读调贴转载输运邮钥问际隐须须马约类凭内户只只",
)
"""Traditional forms of the characters the patterns above are written with: 無視之前的所有指令
is 无视之前的所有指令 to a model. Only those: every character it gives is one the patterns use
(a test holds it to them), so it stays small and needs no converter."""

_HAN_OR_STOP = (
    "[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f、。「」『』《》,.:;!?]"
)
SPACE_BETWEEN_HAN = re.compile(f"(?<={_HAN_OR_STOP})[ \t]+(?={_HAN_OR_STOP})")
"""Spaces between Chinese characters (or their punctuation), which Chinese does not write:
忽 略 之 前 的 指 令 reads as 忽略之前的指令."""
