"""The ``servesim`` command.

``servesim predict [CONFIG] [--set key.path=value ...] [--out DIR] [--format table|json] [--quiet] [--plot]``
runs one simulation (the bundled default example when CONFIG is omitted), prints a
summary and writes the output files; ``servesim plot PATH`` draws figures of an output
folder or of ``servesim validate`` results.  Errors in the user's input are printed as one
clear message with exit status 2; no traceback, no partial output files.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path

# A run does no linear algebra and the calibration fits are small, so numpy's OpenBLAS threads
# would only spin: about 0.08 s of CPU when numpy loads, on two cores.  Set before the imports
# below load numpy; a value the user set wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from servesim.errors import ConfigError, ServesimError  # noqa: E402 (after the BLAS setting)
from servesim.report.plots import RUN_FIGURES  # noqa: E402


def _add_predict(sub) -> None:
    p = sub.add_parser("predict", help="simulate a deployment under a workload and report what it would show")
    p.add_argument("config", nargs="?", help="YAML config (default: the bundled example)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
                   help="override a config value, e.g. --set deployment.workers=4 (repeatable)")
    p.add_argument("--out", help="output folder (overrides output.dir)")
    p.add_argument("--no-files", action="store_true", help="write no output files")
    p.add_argument("--format", choices=("table", "json"), default="table", help="console summary format")
    p.add_argument("--quiet", "-q", action="store_true",
                   help="no progress bar or progress lines (the summary is still printed)")
    p.add_argument("--mode", choices=("fast", "step"), help="simulation mode (overrides simulation.mode)")
    p.add_argument("--plot", action="store_true",
                   help="also draw latency.png and timeline.png in the output folder (servesim[plot])")
    p.add_argument("--report", action="store_true",
                   help="also write report.html (interactive, self-contained) in the output folder (servesim[report])")


def _add_plot(sub) -> None:
    p = sub.add_parser("plot", help="draw figures of a predict output folder or of validate results")
    p.add_argument("path", help="a `servesim predict` output folder (latency.png, timeline.png) or a "
                                "`servesim validate --out` CSV (predicted against measured)")
    p.add_argument("--out", help="folder for a run's figures (default: the run folder), or the PNG file "
                                 "for validate results (default: the CSV's name with .png)")


def _add_report(sub) -> None:
    p = sub.add_parser("report", help="write one self-contained HTML report of runs (compared) or a sweep")
    p.add_argument("paths", nargs="+", metavar="RUN_DIR",
                   help="`servesim predict` output folders (two or more are compared) or sweep folders")
    p.add_argument("--out", help="the HTML file (default: report.html in the folder given, or in the working "
                                 "directory for several)")


def _add_catalog(sub) -> None:
    p = sub.add_parser("models", help="list the bundled models with their size, context and default precision")
    p.add_argument("--aliases", action="store_true", help="list the other names each bundled config answers to")
    sub.add_parser("gpus", help="list the bundled GPUs with their memory, bandwidth and peaks")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="servesim", description="Simulate LLM inference serving without GPUs.")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command")
    _add_predict(sub)
    _add_plot(sub)
    _add_report(sub)
    _add_catalog(sub)
    from servesim.plan.cli import add_subcommands as add_plan_subcommands

    add_plan_subcommands(sub)  # sweep, recommend, maxload (docs/planning.md)
    try:
        from servesim.validate.cli import add_subcommands
    except ImportError:  # validate/calibrate not installed in this build
        pass
    else:
        add_subcommands(sub)
    from servesim.serve.cli import add_subcommand as add_serve

    add_serve(sub)
    return parser


#: What a run writes (figures only with --plot); all are removed before a run into the folder.
OUTPUT_FILES = ("prediction.json", "requests.parquet", "timeseries.parquet", "kv_events.jsonl", "plays.parquet") + \
    RUN_FIGURES + ("report.html",)


def _prepare_output_dir(out_dir: Path, source: str) -> None:
    """Check before the run that the output folder can be written (a run is not wasted on one
    that cannot).  Nothing in it is touched: the run's files replace the previous ones as a
    set once all are written (servesim.report.files.OutputSet)."""
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"{source}: {out_dir} is a file, expected a folder for the output files")
    parent = out_dir.absolute().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"{source}: cannot write the output folder {out_dir} ({exc.strerror or exc})") from None
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"{source}: cannot write the output folder {out_dir} (its folder {parent} is not writable)")


def cmd_predict(args: argparse.Namespace) -> int:
    from rich.console import Console

    from servesim.api import predict
    from servesim.config import load_config
    from servesim.report.console import render_summary
    from servesim.report.html import write_report
    from servesim.report.html_figures import plotly_modules
    from servesim.report.plots import plot_run, require_matplotlib
    from servesim.report.progress import Progress, expected_requests

    overrides = list(args.overrides)
    if args.mode:
        overrides.append(f"simulation.mode={args.mode}")
    cfg = load_config(args.config, overrides)
    if args.out == "":
        raise ConfigError("--out: expected an output folder name, got ''")
    out_arg = args.out if args.out is not None else cfg.output.dir
    if args.plot and (args.no_files or not out_arg):
        raise ConfigError("--plot draws from the output files: it needs an output folder (--out DIR or "
                          "output.dir) and not --no-files")
    if args.plot:
        if not cfg.output.requests:
            raise ConfigError("--plot draws from requests.parquet: it needs output.requests: true")
        require_matplotlib()  # a missing matplotlib is reported before the run, not after it
    if args.report:
        if args.no_files or not out_arg or not cfg.output.requests:
            raise ConfigError("--report draws from the output files: it needs an output folder (--out DIR or "
                              "output.dir), output.requests: true and not --no-files")
        plotly_modules()  # a missing plotly is reported before the run
    writes = not args.no_files and bool(args.out is not None or cfg.output.dir)
    if writes:
        _prepare_output_dir(Path(out_arg), "--out" if args.out is not None else "output.dir")
    show_progress = not args.quiet
    total = expected_requests(cfg) if show_progress else None
    with Progress(total, show_progress) as progress:
        pred = predict(cfg, progress=progress if show_progress else None)
    drawn: list[Path] = []
    also = (lambda folder: drawn.extend(plot_run(folder))) if args.plot else None
    out_dir = pred.write(out_arg, also=also) if writes else None
    figures = [Path(out_dir) / f.name for f in drawn] if out_dir is not None else []
    report, report_error = None, None
    if args.report and out_dir is not None:  # from the files in place (its label is the folder's name)
        try:
            report = write_report([out_dir])
        except ServesimError as exc:  # e.g. nothing to draw: the summary below says why
            report_error = exc
    if args.format == "json":
        doc = {"summary": pred.summary, "host": pred.host, "deployment": pred.deployment.describe(),
               "workload": pred.workload, "output_dir": str(out_dir) if out_dir else None,
               "figures": [str(f) for f in figures], "report": str(report) if report else None}
        print(json.dumps(doc, indent=2))
        return _report_failed(report_error)
    console = Console()
    if not console.is_terminal:
        console = Console(width=130)  # pipes and files: room for every column
    render_summary(pred.summary, pred.header(), console, pred.host)
    if out_dir is not None:
        # the set replaced the previous one whole, so what is there now is this run's
        written = [name for name in OUTPUT_FILES if (Path(out_dir) / name).exists()]
        console.print(f"Wrote {Path(out_dir) / written[0]}" + "".join(f", {n}" for n in written[1:]))
    return _report_failed(report_error)


def _report_failed(error: Exception | None) -> int:
    """Exit status of a run whose --report could not be written (after its summary was printed)."""
    if error is None:
        return 0
    print(f"servesim: error: --report: {error}", file=sys.stderr)
    return 2


def cmd_plot(args: argparse.Namespace) -> int:
    from servesim.report.plots import PlotError, plot_run, plot_validation

    path = Path(args.path)
    if path.is_dir():
        written = plot_run(path, args.out)
        if len(written) == 1:
            print(f"{path}: no timeseries.parquet (output.timeseries: false), timeline.png not drawn")
    elif path.is_file():
        written = [plot_validation(path, args.out)]
    else:
        raise PlotError(f"{path}: no such file or folder (expected a predict output folder or a validate CSV)")
    for f in written:
        print(f"Wrote {f}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from servesim.report.html import write_report

    print(f"Wrote {write_report(args.paths, args.out)}")
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    from rich.console import Console

    from servesim.catalog import render_aliases, render_models

    console = Console() if sys.stdout.isatty() else Console(width=140)
    (render_aliases if args.aliases else render_models)(console)
    return 0


def cmd_gpus(args: argparse.Namespace) -> int:
    from rich.console import Console

    from servesim.catalog import render_gpus

    render_gpus(Console() if sys.stdout.isatty() else Console(width=140))
    return 0


class _CtrlC:
    """Python's own Ctrl-C handler, remembering that Ctrl-C came, for the length of a command.

    A KeyboardInterrupt raised inside a library's native code can come out as another error
    (pydantic-core building a schema turns it into a SchemaError, exit status 1 with a
    traceback), so main asks ``seen``, not only the exception's type, whether the run was
    interrupted.  A program that embeds main with a SIGINT handler of its own keeps it.
    """

    def __init__(self) -> None:
        self.seen = False
        self._previous: object = None

    def _handle(self, signum: int, frame: object) -> None:
        self.seen = True
        signal.default_int_handler(signum, frame)

    def __enter__(self) -> _CtrlC:
        self._previous = signal.getsignal(signal.SIGINT)
        if self._previous is signal.default_int_handler:
            signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        if signal.getsignal(signal.SIGINT) == self._handle:
            signal.signal(signal.SIGINT, self._previous)


def _interrupted() -> int:
    print("servesim: interrupted", file=sys.stderr)
    return 130


def main(argv: list[str] | None = None) -> int:
    with _CtrlC() as ctrl_c:
        try:
            return _dispatch(argv)
        except KeyboardInterrupt:
            return _interrupted()
        except ServesimError as exc:
            if ctrl_c.seen:  # the interrupt, wrapped by a loader that reports bad input
                return _interrupted()
            print(f"servesim: error: {exc}", file=sys.stderr)
            return 2
        except BrokenPipeError:  # the reader went away (`servesim predict | head`): not an error of ours
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())  # Python's flush at exit would fail on the closed pipe again
            return 0
        except Exception:
            if ctrl_c.seen:  # the interrupt, turned into another error inside native code
                return _interrupted()
            raise


def _dispatch(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        from servesim import __version__

        print(f"servesim {__version__}")
        return 0
    if args.command is None:
        parser.print_help()
        return 2
    handler = {"predict": cmd_predict, "plot": cmd_plot, "report": cmd_report, "models": cmd_models,
               "gpus": cmd_gpus}.get(args.command) or getattr(args, "handler", None)
    return handler(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
