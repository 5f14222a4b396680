"""Checks and encodings both vector stores share, so they accept and refuse the same input."""

from __future__ import annotations

import json
import math
import operator
import re
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from core_agent.contracts.errors import EmbeddingMismatchError, UsageError
from core_agent.contracts.vector_store import MetadataValue, VectorRecord

_NAMESPACE = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
TAG_SEPARATOR = "="


@dataclass(frozen=True, slots=True)
class PreparedRecord:
    """A validated record: its unit-length vector as float32 and its filter tags."""

    record: VectorRecord
    unit: array[float]
    tags: list[str]


def check_namespace(namespace: str) -> str:
    """Return ``namespace`` or raise ``UsageError`` naming what is wrong with it."""
    if not _NAMESPACE.fullmatch(namespace):
        raise UsageError(
            f"invalid vector namespace {namespace!r}: use 1-128 letters, digits, '_', '.', ':' "
            "or '-'"
        )
    return namespace


def unit_vector(values: Sequence[float], *, what: str) -> array[float]:
    """``values`` scaled to length 1, as float32.

    Raises:
        UsageError: A value is not a finite number, or every value is zero.
    """
    # map() rather than generator expressions: every search normalises its query here.
    try:
        floats = list(map(float, values))
    except (TypeError, ValueError) as exc:
        raise UsageError(f"{what}: vector values must be numbers") from exc
    if not floats:
        raise UsageError(f"{what}: the vector is empty")
    if not all(map(math.isfinite, floats)):
        raise UsageError(f"{what}: the vector contains NaN or infinite values")
    norm = math.sqrt(math.fsum(map(operator.mul, floats, floats)))
    if norm == 0.0:
        raise UsageError(f"{what}: a zero vector has no direction to compare")
    unit = array("f", [v / norm for v in floats])
    if not all(map(math.isfinite, unit)):
        raise UsageError(f"{what}: the vector does not fit in 32-bit floats")
    return unit


def tag(key: str, value: Any) -> str:
    """The filter tag for one metadata pair; equal values of the same type give equal tags.

    Raises:
        UsageError: An empty key or a value that is not a string, number or boolean.
    """
    if not isinstance(key, str) or not key:
        raise UsageError("metadata keys must be non-empty strings")
    if not isinstance(value, str | int | float | bool):
        raise UsageError(
            f"metadata {key!r}: values must be strings, numbers or booleans, "
            f"not {type(value).__name__}"
        )
    if isinstance(value, float) and not math.isfinite(value):
        raise UsageError(f"metadata {key!r}: NaN and infinity cannot be stored or matched")
    return f"{key}{TAG_SEPARATOR}{json.dumps(value)}"


def where_tags(where: Mapping[str, Any] | None) -> list[str]:
    """Tags a record must all carry to match ``where``."""
    return sorted({tag(key, value) for key, value in (where or {}).items()})


def prepare(records: Sequence[VectorRecord], dimension: int | None) -> list[PreparedRecord]:
    """Validate a batch before anything is written.

    ``dimension`` is the collection's, or ``None`` for a new collection (the batch must then
    agree with itself).

    Raises:
        UsageError: The first problem found, naming the record.
    """
    seen: set[str] = set()
    prepared: list[PreparedRecord] = []
    for record in records:
        if not isinstance(record.id, str) or not record.id:
            raise UsageError("vector record ids must be non-empty strings")
        if record.id in seen:
            raise UsageError(f"vector record {record.id!r} appears twice in one upsert")
        seen.add(record.id)
        unit = unit_vector(record.vector, what=f"vector record {record.id!r}")
        # A new collection takes its dimension from the batch's first record.
        expected = dimension if dimension is not None else len(unit)
        dimension = expected
        if len(unit) != expected:
            raise UsageError(
                f"vector record {record.id!r} has {len(unit)} dimensions; expected {expected}"
            )
        tags = [tag(key, value) for key, value in record.metadata.items()]
        if not isinstance(record.text, str):
            raise UsageError(f"vector record {record.id!r}: text must be a string")
        prepared.append(PreparedRecord(record, unit, tags))
    return prepared


def search_arguments(
    namespace: str, query: Sequence[float], k: int, where: Mapping[str, Any] | None
) -> tuple[array[float], list[str]]:
    """A search's query as a unit vector and its filter as tags, after checking them all.

    Raises:
        UsageError: A bad namespace, ``k`` < 1, a bad query vector or a bad filter.
    """
    check_namespace(namespace)
    if k < 1:
        raise UsageError(f"k must be at least 1, got {k}")
    return unit_vector(query, what="query"), where_tags(where)


def check_identity(
    namespace: str,
    *,
    stored_model: str,
    stored_dimension: int,
    model: str,
    dimension: int,
) -> None:
    """Raise ``EmbeddingMismatchError`` unless the model and dimension are the stored ones."""
    if not model:
        raise UsageError("embedding_model must name the model that produced the vectors")
    if model != stored_model or dimension != stored_dimension:
        raise EmbeddingMismatchError(
            namespace,
            stored_model=stored_model,
            stored_dimension=stored_dimension,
            model=model,
            dimension=dimension,
        )


def metadata_json(metadata: Mapping[str, MetadataValue]) -> str:
    """Metadata as stored: compact JSON with sorted keys."""
    return json.dumps(dict(metadata), sort_keys=True, separators=(",", ":"))


def metadata_from_json(text: str) -> dict[str, MetadataValue]:
    """Metadata as read back."""
    loaded: dict[str, MetadataValue] = json.loads(text)
    return loaded
