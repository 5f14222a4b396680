"""Sub-goals and dependencies of a task written in Chinese, for the task classifier.

Chinese puts no spaces between words and orders a request differently from English, so the
English rules (an action verb opens a clause, "then" joins two) do not carry over. Here:

- A task is cut into clauses at sentence and clause punctuation (。！？；，、 and their ASCII
  forms) and, inside a clause, at a connective (然后, 接着, 再, 并, 同时, 以及...) that is
  followed by a verb, the way "..., and then write" opens a new instruction in English.
- A clause is a sub-goal when, after courtesy and sequencing words (请, 帮我, 先, 然后...), it
  opens with an action verb (下载, 总结, 写...), with a preposition or 把 whose phrase leads to
  one (从…下载, 按主题分组, 把它们改成...), or when it asks a question (什么, 吗, ？...).
- Dependencies are sequencing words where a clause starts (先/首先…然后/接着…最后, 再, 之后),
  data flow (根据/基于 a previous result, 用这些, 把它们, 分别, 逐个) and ordinals (第一步, 其次).
- Inline enumerations (一、二、, （1）, ①, "1." before Chinese text) count as list items.

Matching is a few compiled regular expressions over the clause, so a decision stays well
under a millisecond; no segmentation library is needed for this (and the kernel may not
import one). Words that are sequencing markers elsewhere but not here (先秦, 最后一章, 合并,
再见) are not counted: a marker counts only where a clause starts and a verb follows it.
"""

from __future__ import annotations

import re

# Action verbs that open an instruction, longest first so that 检查 wins over 查. Single
# characters are verbs only where a clause starts or after a preposition's phrase.
_VERBS = sorted(
    set(
        """
        下载 上传 计算 统计 汇总 总结 概括 归纳 摘要 提取 抽取 抓取 爬取 采集 收集 搜集 整理
        分组 分类 归类 排序 筛选 过滤 去重 去掉 删除 删掉 移除 清理 清洗 清除 合并 拆分 拆成
        比较 对比 比对 分析 评估 评价 检查 检验 核对 核查 校对 审阅 审查 审核 复查 验证 测试
        运行 执行 启动 重启 停止 部署 发布 安装 卸载 升级 更新 配置 设置 修改 修复 修正 改成
        改为 替换 重命名 重构 优化 调整 迁移 备份 恢复 还原 导出 导入 同步 克隆 提交 推送 拉取
        获取 读取 打开 关闭 阅读 浏览 查看 查找 查询 查阅 搜索 检索 寻找 找出 找到 定位 识别
        列出 罗列 标注 标记 打标签 添加 加入 加到 插入 创建 新建 生成 制作 绘制 画出 设计 规划
        计划 安排 预订 预约 订购 购买 支付 发送 发给 发邮件 回复 通知 提醒 分享 转发 保存 存储
        存到 记录 写入 写成 撰写 编写 起草 草拟 改写 重写 润色 翻译 转换 换算 转成 格式化
        解释 说明 描述 介绍 讲解 告诉 回答 推荐 建议 提出 选择 挑选 挑出 选出 决定 判断 确认
        预测 估算 估计 衡量 测量 监控 跟踪 追踪 展示 显示 呈现 可视化 输出 打印 发布 上线
        学习 复习 背诵 练习 研究 调研 调查 梳理 串起来 汇报 报告 通读 精读 列举 补充 完善
        写 读 查 找 算 删 改 看 列 选 做 跑 存 画 发 订 买 装 问 讲 翻 搜 排 测 拉 推 取 抓
        """.split()
    ),
    key=len,
    reverse=True,
)
_VERB = "(?:" + "|".join(_VERBS) + ")"
_MULTI_CHAR_VERB = "(?:" + "|".join(v for v in _VERBS if len(v) > 1) + ")"

# Words that only introduce the instruction: courtesy, sequencing, adverbs of manner.
_LEAD_IN = re.compile(
    r"^(?:\s|请你|请|麻烦你|麻烦|帮我|帮忙|你|我想|我要|我需要|需要|能否|能不能|可以|"
    r"首先|其次|然后再|然后|接着|随后|之后|此后|最后|最终|再|并且|并|同时|以及|而且|另外|"
    r"还要|还|也|先|一起|马上|立刻|分别|逐个|依次|各自|重新|仔细|认真|快速|简单地?|"
    r"第[一二三四五六七八九十\d]+步?[，,：:]?|[一二三四五六七八九十]+、|\d+[.)、．]|"
    r"[（(]\d+[）)]|[①-⑩])+"
)
_PREPOSITION = re.compile(
    r"^(?:把|将|按照|按|依照|根据|基于|依据|为|给|对|针对|在|从|用|使用|通过|以|向)"
)
_QUESTION = re.compile(
    r"什么|哪|吗[？?。]?$|多少|几[个点天年月岁次]|怎么|怎样|如何|为什么|是否|有没有|[？?]"
)

_OPENS_WITH_VERB = re.compile(_VERB)
# Inside a preposition's phrase a single-character verb counts only where it is plainly one:
# after a place word (在笔记里写) or before its object or result (写一篇, 改成, 发给).
_HAS_VERB = re.compile(
    _MULTI_CHAR_VERB + "|(?<=[里中上内下后])" + _VERB + "|" + _VERB + "(?=[一个成到给出])"
)

# Where a clause ends: sentence and clause punctuation, Chinese and ASCII.
_CLAUSE_BREAK = re.compile(r"[。！？；;!?\n，,、：:]+")
# A connective inside a clause starts a new one when a verb (or a preposition) follows.
_INNER_CONNECTIVE = re.compile(
    r"(?:然后再|然后|接着|随后|之后|再|(?<![合兼吞])并且?(?![发行非不没列购存])|同时|以及|而且|还要)"
    r"(?=(?:把|将|按|为|给|对|在|从|用|根据|分别|逐个)?" + _VERB + ")"
)
_SEQUENCE_AT_START = re.compile(
    r"^(?:请|麻烦|帮我)?(?:首先|先|然后再|然后|接着|随后|之后|此后|最后|最终|再|完成后|做完后|"
    r"其次|第[一二三四五六七八九十]步?)"
)
_DATA_FLOW = re.compile(
    r"根据|基于|依据|按照(?:这些|那些|它们|结果|上述|以上)|"
    r"(?:用|把|将|对|从|给|为|拿)(?:这些|那些|它们|上述|以上|前面的|上面的|得到的|结果)|"
    r"分别|逐个|逐一|依次|各自|(?:为|对|给)每"
)
_ENUMERATOR = re.compile(
    r"(?:^|[\s；;。：:，,])(?:[一二三四五六七八九十]+、|\d+[、．]|\d+[.)](?=[^\d\s])|"
    r"[（(]\d+[）)]|[①-⑩]|第[一二三四五六七八九十]+步)"
)


def enumerated_items(text: str) -> int:
    """Inline list items (一、 二、, 1、, （1）, ①, 第一步, "1." before Chinese text)."""
    return len(_ENUMERATOR.findall(text))


def clauses(text: str) -> list[str]:
    """The clauses of ``text``: cut at punctuation, then at connectives before a verb."""
    pieces: list[str] = []
    for part in _CLAUSE_BREAK.split(text):
        start = 0
        for match in _INNER_CONNECTIVE.finditer(part):
            if match.start() > start:
                pieces.append(part[start : match.start()])
            start = match.start()
        pieces.append(part[start:])
    return [piece.strip() for piece in pieces if piece.strip()]


def _body(clause: str) -> str:
    return _LEAD_IN.sub("", clause)


def is_sub_goal(clause: str) -> bool:
    """Whether ``clause`` asks for an action or a question answered."""
    body = _body(clause)
    if not body:
        return False
    if _OPENS_WITH_VERB.match(body):
        return True
    if _PREPOSITION.match(body) and _HAS_VERB.search(body, 1):
        return True
    return _QUESTION.search(body) is not None


def dependencies(clause_list: list[str]) -> int:
    """Sequencing words where clauses start, plus data-flow words anywhere."""
    count = 0
    for clause in clause_list:
        marker = _SEQUENCE_AT_START.match(clause)
        if marker is not None and _follows_with_action(clause[marker.end() :]):
            count += 1
        count += len(_DATA_FLOW.findall(clause))
    return count


def _follows_with_action(rest: str) -> bool:
    body = _body(rest)
    return bool(_OPENS_WITH_VERB.match(body) or _PREPOSITION.match(body))
