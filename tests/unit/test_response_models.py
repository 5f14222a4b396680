"""Finding a task's response model by its recorded name never imports anything."""

import sys

from pydantic import BaseModel

from core_agent.kernel.response_models import loaded_model, model_name


class Outer(BaseModel):
    class Inner(BaseModel):
        value: int

    value: int


NOT_A_MODEL = object()


def test_a_class_of_an_imported_module_is_found_nested_ones_too() -> None:
    assert loaded_model(model_name(Outer)) is Outer
    assert loaded_model(model_name(Outer.Inner)) is Outer.Inner


def test_a_module_not_imported_is_not_imported() -> None:
    assert "json.tool" not in sys.modules
    assert loaded_model("json.tool:main") is None
    assert "json.tool" not in sys.modules


def test_anything_but_a_pydantic_model_is_refused() -> None:
    assert loaded_model(f"{__name__}:NOT_A_MODEL") is None
    assert loaded_model("os:path") is None
    assert loaded_model(f"{__name__}:Outer.missing") is None
    assert loaded_model(f"{__name__}") is None


def test_a_class_defined_in_a_function_cannot_be_found() -> None:
    class Local(BaseModel):
        value: int

    assert "<locals>" in model_name(Local)
    assert loaded_model(model_name(Local)) is None
