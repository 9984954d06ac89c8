"""``servesim models`` and ``servesim gpus``: what is bundled, with the facts that decide a deployment.

Models: the name to put in ``deployment.model``, its family, total and active parameters,
layers, context length, the weight precision it defaults to (``deployment.weight_dtype`` unset:
from the checkpoint's name or ``quantization_config``), the weights' size at that precision and
the KV-cache bytes per token (bf16 KV); and the aliases that map to it.  GPUs: the name for
``deployment.gpu``, memory, memory bandwidth, dense tensor peaks per precision and the scale-up
link.  Both lists come from the bundled files, so they are what the simulator uses.
"""

from __future__ import annotations

from servesim.perf.precision import WEIGHT_BYTES


def model_rows() -> list[dict]:
    """One dict per bundled model config (sorted by id)."""
    from servesim.cluster.deployment import infer_weight_dtype
    from servesim.models.arch import ALIASES, bundled_models, load_model
    from servesim.perf.memory import Layout, weights_bytes_per_gpu

    rows = []
    for hf_id in bundled_models():
        arch = load_model(hf_id)
        params = arch.param_count()
        dtype = infer_weight_dtype(hf_id, arch)
        rows.append({
            "model": hf_id,
            "family": arch.family,
            "params_b": params.total / 1e9,
            "active_b": params.active / 1e9,
            "layers": arch.num_layers,
            "context": arch.max_position_embeddings,
            "weight_dtype": dtype,
            "weights_gb": weights_bytes_per_gpu(arch, dtype, Layout(tp=1)) / 1e9,
            "kv_kb_per_token": arch.kv_bytes_per_token(2.0) / 1e3,
            "aliases": sorted(a for a, target in ALIASES.items() if target == hf_id),
        })
    return rows


def gpu_rows() -> list[dict]:
    """One dict per bundled GPU spec (sorted by name)."""
    from servesim.hardware.gpu import known_gpus, load_gpu

    rows = []
    for name in known_gpus():
        g = load_gpu(name)
        rows.append({
            "gpu": g.name, "vendor": g.vendor, "memory_gb": g.memory_gb, "bandwidth_tbs": g.memory_bandwidth_gbs / 1e3,
            "bf16_tflops": g.tflops.get("bf16"), "fp8_tflops": g.tflops.get("fp8"), "fp4_tflops": g.tflops.get("fp4"),
            "scale_up": f"{g.scale_up.kind} {g.scale_up.bandwidth_gbs:g} GB/s × {g.scale_up.domain_size}",
            "aliases": list(g.aliases),
        })
    return rows


def _num(v, digits: int = 1) -> str:
    return "—" if v is None else f"{v:,.{digits}f}"


def render_models(console) -> None:
    from rich.table import Table

    t = Table(title="Bundled models (deployment.model; a local config.json path works too)", title_justify="left")
    for col in ("model", "family", "params (B)", "active (B)", "layers", "context", "precision", "weights GB",
                "KV kB/token"):
        t.add_column(col, justify="left" if col in ("model", "family", "precision") else "right")
    for r in model_rows():
        t.add_row(r["model"], r["family"], _num(r["params_b"]), _num(r["active_b"]), str(r["layers"]),
                  f"{r['context']:,}", r["weight_dtype"], _num(r["weights_gb"]), _num(r["kv_kb_per_token"]))
    console.print(t)
    console.print("precision: the default deployment.weight_dtype (the checkpoint's own precision; set "
                  f"deployment.weight_dtype to one of {', '.join(k for k in ('bf16', 'fp8', 'fp4', 'int4') if k in WEIGHT_BYTES)} "
                  "to change it); weights GB: all weights at that precision. KV: bf16 KV cache over all layers. Aliases: `servesim models --aliases`.")


def render_aliases(console) -> None:
    for r in model_rows():
        if r["aliases"]:
            console.print(f"[bold]{r['model']}[/]: {', '.join(r['aliases'])}", highlight=False)


def render_gpus(console) -> None:
    from rich.table import Table

    t = Table(title="Bundled GPUs (deployment.gpu; a GPU YAML path works too)", title_justify="left")
    for col in ("gpu", "vendor", "memory GB", "HBM TB/s", "bf16 TFLOPS", "fp8 TFLOPS", "fp4 TFLOPS", "scale-up",
                "aliases"):
        t.add_column(col, justify="left" if col in ("gpu", "vendor", "scale-up", "aliases") else "right")
    for r in gpu_rows():
        t.add_row(r["gpu"], r["vendor"], _num(r["memory_gb"], 0), _num(r["bandwidth_tbs"], 2),
                  _num(r["bf16_tflops"], 0), _num(r["fp8_tflops"], 0), _num(r["fp4_tflops"], 0), r["scale_up"],
                  ", ".join(r["aliases"]))
    console.print(t)
    console.print("Dense peaks (no sparsity); sources are listed in each GPU's YAML file.")
