"""``servesim serve CONFIG``: the command-line side of the live server (docs/serve.md)."""

from __future__ import annotations

import argparse

from servesim.errors import ConfigError


def add_subcommand(sub) -> None:
    p = sub.add_parser("serve", help="serve an OpenAI-compatible endpoint whose timing comes from the engine models")
    p.add_argument("config", nargs="?", help="YAML config (default: the bundled example); its deployment is served")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
                   help="override a config value (repeatable)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port of the front door, or of worker 0 with "
                                                          "--per-worker (default 8000; 0 picks a free port)")
    p.add_argument("--speed", type=float, default=1.0,
                   help="virtual seconds per wall second (default 1: real time; 10 runs ten times faster)")
    p.add_argument("--per-worker", action="store_true",
                   help="one server per simulated worker on PORT, PORT+1, ... instead of one front door with the "
                        "configured router")
    p.add_argument("--kv-events", metavar="tcp://HOST:PORT",
                   help="publish KV events over ZMQ in vLLM's format (worker i on PORT+i)")
    p.add_argument("--tokenizer", metavar="DIR", help="a local Hugging Face tokenizer folder to count prompt tokens "
                                                      "(needs transformers); default: 4 characters per token")
    p.add_argument("--block-size", type=int, default=16,
                   help="tokens per hashed prompt block: the prefix cache matches prompts in such blocks (default 16)")
    p.add_argument("--eos-mean-tokens", type=float, default=256.0,
                   help="without ignore_eos, a request stops at a geometric natural length of this mean, capped "
                        "by max_tokens (default 256; 0 = always max_tokens)")
    p.add_argument("--served-model-name", help="model name clients use (the config's model id is accepted too)")
    p.set_defaults(handler=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    from servesim.config import load_config

    try:
        from servesim.serve.server import Server, ServeOptions
    except ImportError as exc:
        raise ConfigError(f"servesim serve needs the serve extra: pip install 'servesim[serve]' ({exc})") from None
    if args.speed <= 0:
        raise ConfigError(f"--speed must be positive, got {args.speed}")
    if args.block_size < 1:
        raise ConfigError(f"--block-size must be at least 1, got {args.block_size}")
    cfg = load_config(args.config, args.overrides)
    opts = ServeOptions(host=args.host, port=args.port, speed=args.speed, per_worker=args.per_worker,
                        kv_events=args.kv_events, tokenizer=args.tokenizer, block_size=args.block_size,
                        eos_mean_tokens=args.eos_mean_tokens, served_model_name=args.served_model_name)
    try:
        server = Server(cfg, opts)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    server.run_forever()
    return 0
