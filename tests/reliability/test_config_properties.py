"""Property tests of the config loader: random valid configs load and survive the round trip
through prediction.json's resolved config; random mutations of them either load or fail
with a ConfigError (exit 2) whose message names the key — never another exception."""

from __future__ import annotations

import json
import math
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servesim.config import load_config
from servesim.errors import ConfigError

SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                            HealthCheck.function_scoped_fixture])
pos_float = st.floats(min_value=0.01, max_value=1e4, allow_nan=False)


def length_dist():
    lo = st.integers(1, 4000)
    return st.one_of(
        st.builds(lambda v: {"dist": "fixed", "value": v}, lo),
        st.tuples(lo, lo).map(lambda t: {"dist": "uniform", "low": min(t), "high": max(t)}),
        st.builds(lambda m, s: {"dist": "normal", "mean": m, "std": s}, lo, st.integers(0, 500)),
        st.builds(lambda m, s, mx: {"dist": "lognormal", "median": m, "sigma": s, "max": mx},
                  lo, st.floats(0, 2), st.integers(4000, 100_000)),
        st.builds(lambda m: {"dist": "exponential", "mean": m}, lo),
    )


def duration_dist():
    return st.one_of(
        st.builds(lambda v: {"dist": "fixed", "value": v}, pos_float),
        st.builds(lambda m: {"dist": "exponential", "mean": m}, pos_float),
    )


synthetic = st.fixed_dictionaries(
    {"kind": st.just("synthetic"), "num_requests": st.integers(1, 10**7),
     "arrival": st.one_of(
         st.builds(lambda r: {"process": "poisson", "rate": r}, pos_float),
         st.builds(lambda r: {"process": "constant", "rate": r}, pos_float),
         st.builds(lambda r, b: {"process": "gamma", "rate": r, "burstiness": b}, pos_float, pos_float)),
     "input": length_dist(), "output": length_dist()},
    optional={"prefix": st.builds(lambda g, n, s: {"num_groups": g, "length": n, "share": s},
                                  st.integers(1, 64), st.integers(1, 4096), st.floats(0, 1)),
              "sessions": st.builds(lambda t, th, n: {"turns": t, "think_time_s": th, "new_input": n},
                                    length_dist(), duration_dist(), length_dist()),
              "block_size": st.sampled_from([16, 64, 512])})
closed_loop = st.one_of(
    st.fixed_dictionaries({"kind": st.just("closed_loop"), "recipe": st.just("fixed"),
                           "concurrency": st.integers(1, 512), "isl": st.integers(1, 8192), "osl": st.integers(1, 4096)},
                          optional={"output_spread": st.floats(0, 0.9), "num_prompts": st.integers(1, 10**5),
                                    "warmup": st.integers(0, 100)}),
    st.fixed_dictionaries({"kind": st.just("closed_loop"), "recipe": st.just("inferencex_random"),
                           "concurrency": st.integers(1, 512), "isl": st.integers(1, 8192), "osl": st.integers(1, 4096)},
                          optional={"range_ratio": st.floats(0.01, 1), "prompt_pool": st.integers(1, 1000)}),
)
trace = st.builds(lambda path, bs, sp, lim: {"kind": "trace", "path": path, "block_size": bs, "speedup": sp,
                                             **({"limit": lim} if lim else {})},
                  st.sampled_from(["t.jsonl", "traces/a.jsonl.gz"]), st.integers(1, 1024), pos_float,
                  st.one_of(st.none(), st.integers(1, 10**6)))
engine = st.one_of(
    st.sampled_from(["sglang", "vllm", "trtllm"]),
    st.fixed_dictionaries({"name": st.just("sglang")},
                          optional={"schedule_policy": st.sampled_from(["fcfs", "lpm"]), "page_size": st.integers(1, 64)}),
    st.fixed_dictionaries({"name": st.just("vllm")}, optional={"max_num_seqs": st.integers(1, 1024)}),
    st.fixed_dictionaries({"name": st.just("trtllm")}, optional={"max_batch_size": st.integers(1, 2048)}),
)
deployment = st.fixed_dictionaries(
    {},
    optional={"model": st.sampled_from(["meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3-8B"]),
              "gpu": st.sampled_from(["h100_sxm", "h200_sxm", "b200_sxm"]), "engine": engine,
              "tp": st.sampled_from([1, 2, 4, 8]), "workers": st.integers(1, 64),
              "router": st.sampled_from(["round_robin", "random", "least_loaded", "power_of_two", "kv_aware"]),
              "weight_dtype": st.sampled_from(["bf16", "fp8", None]), "kv_dtype": st.sampled_from(["bf16", "fp8", None])})
configs = st.fixed_dictionaries(
    {"workload": st.one_of(synthetic, closed_loop, trace)},
    optional={"seed": st.integers(0, 2**31), "deployment": deployment,
              "output": st.fixed_dictionaries({}, optional={"dir": st.sampled_from(["out", "a/b", None]),
                                                            "requests": st.booleans(), "timeseries": st.booleans(),
                                                            "timeseries_interval_s": pos_float}),
              "simulation": st.fixed_dictionaries({}, optional={"mode": st.sampled_from(["fast", "step"]),
                                                                "max_sim_time_s": st.one_of(st.none(), pos_float)})})


def _write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@SETTINGS
@given(data=configs)
def test_valid_configs_load_and_round_trip(tmp_path, data):
    cfg = load_config(_write(tmp_path, data))
    resolved = json.loads(json.dumps(cfg.model_dump(mode="json")))  # as prediction.json's "config" holds it
    again = load_config(resolved)
    assert again.model_dump(mode="json") == resolved
    assert load_config(_write(tmp_path, resolved)).model_dump(mode="json") == resolved


def _paths(node, prefix=()):
    """Every key path of a nested mapping."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield (*prefix, k)
            yield from _paths(v, (*prefix, k))


JUNK = st.one_of(st.text(max_size=8), st.integers(-10**15, 10**15), st.floats(allow_nan=True, allow_infinity=True),
                 st.booleans(), st.none(), st.lists(st.integers(), max_size=3),
                 st.dictionaries(st.text(min_size=1, max_size=5), st.integers(), max_size=2))


def _typo(key: str, draw) -> str:
    kind = draw(st.sampled_from(["drop", "double", "swap", "append"]))
    i = draw(st.integers(0, max(len(key) - 1, 0)))
    if kind == "drop" and len(key) > 1:
        return key[:i] + key[i + 1:]
    if kind == "double":
        return key[:i] + key[i] + key[i:]
    if kind == "swap" and len(key) > 2 and i < len(key) - 1:
        return key[:i] + key[i + 1] + key[i] + key[i + 2:]
    return key + "x"


@st.composite
def mutated(draw):
    data = draw(configs)
    paths = list(_paths(data))
    path = draw(st.sampled_from(paths))
    parent = data
    for seg in path[:-1]:
        parent = parent[seg]
    key = path[-1]
    op = draw(st.sampled_from(["value", "rename", "delete", "add"]))
    if op == "value":
        parent[key] = draw(JUNK)
        names = {key}
    elif op == "rename":
        new = _typo(key, draw)
        parent[new] = parent.pop(key)
        names = {key, new}
    elif op == "delete":
        del parent[key]
        names = {key}
    else:
        new = draw(st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=10))
        parent[new] = draw(JUNK)
        names = {new, key}
    return data, path, names


@SETTINGS
@given(case=mutated())
def test_mutated_configs_load_or_name_the_key(tmp_path, case):
    data, path, names = case
    try:
        load_config(_write(tmp_path, data))
    except ConfigError as exc:
        message = str(exc)
        # the message names the mutated key, or the section it was in / removed from
        sections = {str(p) for p in path[:-1]}
        assert any(str(n) in message for n in names | sections), (message, path, names)
        assert "Traceback" not in message and "\n\n" not in message


def test_a_run_writes_a_config_that_loads_back(tmp_path):
    """The round trip through a real prediction.json."""
    from servesim.cli import main

    data = {"seed": 4, "workload": {"kind": "synthetic", "num_requests": 20, "arrival": {"rate": 5.0},
                                    "input": {"dist": "fixed", "value": 100}, "output": {"dist": "fixed", "value": 5}},
            "deployment": {"engine": {"name": "vllm", "max_num_seqs": 8}, "workers": 2}}
    assert main(["predict", str(_write(tmp_path, data)), "--out", str(tmp_path / "o"), "--quiet"]) == 0
    doc = json.loads((tmp_path / "o" / "prediction.json").read_text())
    assert load_config(doc["config"]).model_dump(mode="json") == doc["config"]
    assert doc["config"]["deployment"]["engine"]["max_num_seqs"] == 8 and math.isclose(
        doc["config"]["workload"]["arrival"]["rate"], 5.0)
