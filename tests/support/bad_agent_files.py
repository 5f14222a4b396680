"""Agent files that must be refused, with the one line a user sees for each.

Each file is written as ``agent.yaml`` in the current directory and named as ``agent.yaml``.
"""

BAD_AGENT_FILES: dict[str, tuple[str, str]] = {
    "unknown key at the top": (
        "name: helper\nstratgy:\n  mode: react\n",
        "agent.yaml:2:1: unknown key 'stratgy' (did you mean 'strategy'?)",
    ),
    "unknown key in a section": (
        "name: helper\nstrategy:\n  mode: react\n  max_turn: 3\n",
        "agent.yaml:4:3: unknown key 'max_turn' in strategy (did you mean 'max_turns'?)",
    ),
    "unknown key in a policy rule": (
        "policy:\n  rules:\n    - name: r\n      tool: [calculator]\n",
        "agent.yaml:4:7: unknown key 'tool' in policy.rules[0] (did you mean 'tools'?)",
    ),
    "unknown key far from any": (
        "memory:\n  colour: blue\n",
        "agent.yaml:2:3: unknown key 'colour' in memory; accepted: namespace, "
        "knowledge_namespace, recall, recall_k, context_max_tokens, session_window_tokens",
    ),
    "wrong type": (
        "strategy:\n  mode: react\n  max_turns: many\n",
        "agent.yaml:3:14: strategy.max_turns: expected a whole number (got 'many')",
    ),
    "a name where a list goes": (
        "tools: calculator\n",
        "agent.yaml:1:8: tools: expected a list (got 'calculator')",
    ),
    "out of the setting's range": (
        "strategy:\n  max_turns: 0\n",
        "agent.yaml:2:14: strategy.max_turns: Input should be greater than or equal to 1 (got 0)",
    ),
    "bad enum value": (
        "policy:\n  approval_required_risk: hihg\n",
        "agent.yaml:2:27: policy.approval_required_risk: 'hihg' is not accepted; use one of "
        "'low', 'medium', 'high', 'critical' (did you mean 'high'?)",
    ),
    "bad strategy mode": (
        "strategy:\n  mode: reactt\n",
        "agent.yaml:2:9: strategy.mode: 'reactt' is not accepted; use one of 'adaptive', "
        "'react', 'plan_execute' (did you mean 'react'?)",
    ),
    "bad YAML syntax": (
        "name: helper\ntools: [calculator\nstrategy: {}\n",
        "agent.yaml:3:9: invalid YAML: while parsing a flow sequence started on line 2: "
        "expected ',' or ']', but got ':'",
    ),
    "a tab for indentation": (
        "name: helper\n\ttools: []\n",
        "agent.yaml:2:1: invalid YAML: while scanning for the next token: found character "
        "'\\t' that cannot start any token",
    ),
    "missing prompt file": (
        "name: helper\nsystem_prompt_file: prompts/missing.md\n",
        "agent.yaml:2:21: system_prompt_file: no such file: prompts/missing.md",
    ),
    "python tag": (
        'name: helper\nmodel: !!python/object/apply:os.system ["touch pwned"]\n',
        "agent.yaml:2:8: the tag !!python/object/apply:os.system is not allowed: an agent "
        "file holds plain YAML data (mappings, lists, strings, numbers, booleans)",
    ),
    "a key given twice": (
        "tools: [calculator]\nmodel:\n  name: openai/a\n  name: openai/b\n",
        "agent.yaml:4:3: duplicate key 'name' (first given on line 3)",
    ),
    "a key with no value": (
        "strategy:\n  max_turns:\n",
        "agent.yaml:2:3: strategy.max_turns has no value: give one or remove it",
    ),
    "a secret": (
        "model:\n  name: openai/gpt-4o-mini\n  api_key: sk-live-123\n",
        "agent.yaml:3:3: unknown key 'api_key' in model: keys and other secrets are not read "
        "from agent files; set AGENT_MODEL_API_KEY (or the provider's own variable) in the "
        "environment",
    ),
    "an installation setting": (
        "sandbox_mode: unconfined\n",
        "agent.yaml:1:1: unknown key 'sandbox_mode': it is an installation setting, read from "
        "the environment (AGENT_SANDBOX_MODE), not from agent files",
    ),
    "a file that trusts itself": (
        "trust_agent_file: true\npolicy:\n  approval_required_risk: critical\n",
        "agent.yaml:1:1: unknown key 'trust_agent_file': it is an installation setting, read "
        "from the environment (AGENT_TRUST_AGENT_FILE), not from agent files",
    ),
    "a tool set that contains itself": (
        "tool_sets:\n  a: [calculator, b]\n  b: [a]\ntools: [a]\n",
        "agent.yaml:3:7: tool set 'a' contains itself (a -> b -> a)",
    ),
    "both prompts": (
        "system_prompt: Be brief.\nsystem_prompt_file: agent.yaml\n",
        "agent.yaml:2:1: give system_prompt or system_prompt_file, not both",
    ),
    "a list, not a mapping": (
        "- calculator\n- current_time\n",
        "agent.yaml:1:1: an agent file is a YAML mapping (model:, system_prompt:, tools:, ...), "
        "not a list",
    ),
    "tool sets that name each other many times over": (
        # 10**6 paths lead to the loop: each set is expanded once, and the loop found once.
        "tool_sets:\n  s0: [calculator, loop]\n  loop: [s0]\n"
        + "".join(f"  s{i}: [{', '.join([f's{i - 1}'] * 10)}]\n" for i in range(1, 7))
        + "tools: [s6]\n",
        "agent.yaml:3:10: tool set 's0' contains itself (s0 -> loop -> s0)",
    ),
    "a merge key": (
        "policy:\n  rules:\n    - &base {name: a, tools: [calculator], risk: high}\n"
        "    - {<<: *base, name: b}\n",
        "agent.yaml:4:8: merge keys (<<) are not allowed in an agent file: write the keys out",
    ),
    "merge keys that multiply": (
        # Built, each level would hold ten copies of the one below: 10**7 pairs.
        "m0: &m0 {a: 1, b: 2, c: 3, d: 4, e: 5, f: 6, g: 7, h: 8, i: 9, j: 10}\n"
        + "".join(f"m{i}: &m{i} {{<<: [{', '.join([f'*m{i - 1}'] * 10)}]}}\n" for i in range(1, 7)),
        "agent.yaml:2:10: merge keys (<<) are not allowed in an agent file: write the keys out "
        "(and 5 more problems)",
    ),
}
"""Case name: (the file's text, the error's one line)."""
