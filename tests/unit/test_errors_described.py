"""How a failure is described to a user: a group by what it holds, however nested."""

from core_agent.contracts.errors import described


def test_a_plain_error_is_its_type_and_message() -> None:
    assert described(ValueError("bad value")) == "ValueError: bad value"
    assert described(GeneratorExit()) == "GeneratorExit"


def test_a_group_is_described_by_its_leaves() -> None:
    group = ExceptionGroup(
        "two failed", [ValueError("a"), ExceptionGroup("inner", [KeyError("b")])]
    )
    assert described(group) == "ExceptionGroup: two failed (ValueError: a; KeyError: 'b')"


def test_a_large_group_names_its_first_leaves_and_counts_the_rest() -> None:
    group = ExceptionGroup("many", [ValueError(str(n)) for n in range(8)])
    text = described(group)
    assert text.startswith("ExceptionGroup: many (ValueError: 0; ValueError: 1;")
    assert text.endswith("; and 3 more)")
