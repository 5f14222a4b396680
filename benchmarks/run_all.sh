#!/usr/bin/env bash
# Runs every benchmark with the project's virtual environment.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
"$PY" -m benchmarks.react_step_overhead
"$PY" -m benchmarks.tracing_overhead
"$PY" -m benchmarks.react_window_scaling
"$PY" -m benchmarks.plan_step_overhead
"$PY" -m benchmarks.router_eval
"$PY" -m benchmarks.router_eval --data tests/data/routing_heldout.jsonl
"$PY" -m benchmarks.keyword_zh_eval
"$PY" -m benchmarks.safety_latency
"$PY" -m benchmarks.confinement_overhead
"$PY" -m benchmarks.injection_eval
"$PY" -m benchmarks.startup
"$PY" -m benchmarks.chat_start
"$PY" -m benchmarks.retrieval
"$PY" -m benchmarks.tasks_in_flight
"$PY" -m benchmarks.resume_latency
"$PY" -m benchmarks.list_tasks_scaling
"$PY" -m benchmarks.ui_task_list
"$PY" -m benchmarks.stats_query
"$PY" -m benchmarks.wal_growth
"$PY" -m benchmarks.crash_recovery
"$PY" -m benchmarks.first_token
"$PY" -m benchmarks.stdio_protocol
"$PY" -m benchmarks.sync_facade_overhead
"$PY" -m benchmarks.replay
