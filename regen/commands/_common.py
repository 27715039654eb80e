"""What several commands share: the project, store, generator and build context they act on, and
the options they take. Everything heavy is imported inside the function that needs it, so a
command that needs no GPU never imports torch."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import InputError


# -- construction ----------------------------------------------------------------------------------
def project(args):
    from ..project import Project, find_root

    return Project(find_root(Path(args.root) if args.root else None))


def store(project):
    from ..store import Store

    return Store(project.cache_dir)


def generator(args):
    """(generator, problem): the configured generator, or why there is none."""
    choice = args.generator or os.environ.get("REGEN_GENERATOR") or "auto"
    if choice.startswith("command:"):
        from ..generators.command import CommandGenerator

        return CommandGenerator(choice.split(":", 1)[1]), None
    if choice in ("llm", "auto"):
        if os.environ.get("ANTHROPIC_API_KEY"):
            from ..generators.llm import LLMGenerator

            return LLMGenerator(model=getattr(args, "model", None),
                                base_url=getattr(args, "base_url", None)), None
        why = ("no generator: set ANTHROPIC_API_KEY for the LLM generator, use "
               "--generator command:CMD for a coding agent, or `regen handoff KERNEL --target T` "
               "to write it by hand")
        if choice == "llm":
            raise InputError(why)
        return None, why
    if choice == "openai":
        from ..generators.openai_compat import OpenAIGenerator

        gen = OpenAIGenerator(model=getattr(args, "model", None),
                              base_url=getattr(args, "base_url", None))
        problem = gen.problem()
        if problem:
            raise InputError(problem, field="--generator openai")
        return gen, None
    if choice == "none":
        return None, "generation disabled (--generator none)"
    raise InputError(f"unknown generator {choice!r}; expected llm, openai, command:CMD or none",
                     field="--generator")


DEFAULT_MAX_USD = 5.0


def budget(args, gen=None):
    """The search budget. A model with a known price gets --max-usd (default DEFAULT_MAX_USD);
    for one without a price a limit cannot be enforced: asking for one is an error, and without
    one the build says on stderr that spending is not limited."""
    import sys

    from ..search import Budget

    max_usd = args.max_usd
    price = getattr(gen, "price", None)
    if price is not None and price() is None:
        where = ("~/.config/regen/prices.yaml (or the file $REGEN_PRICES names), e.g. "
                 f"`models: {{{gen.model}: {{input: 3.0, output: 15.0}}}}` in USD per million tokens")
        if max_usd is not None:
            raise InputError(f"no price is known for model {gen.model}, so --max-usd {max_usd:g} "
                             f"cannot be enforced: add its price to {where}", field="--max-usd")
        print(f"regen: warning: no price is known for model {gen.model}: spending is not limited "
              f"and not counted in dollars; add its price to {where}", file=sys.stderr)
    elif max_usd is None:
        max_usd = DEFAULT_MAX_USD
    return Budget(max_candidates=args.max_candidates, repair_rounds=args.repair_rounds,
                  max_usd=max_usd, max_seconds=args.max_seconds)


def settings(**kw):
    """The judge's settings. The one place commands import the judge (regen/judge/)."""
    from ..judge import Settings

    return Settings(**kw)


def context(args, project, **kw):
    from ..build import Context

    s = settings(seeds=getattr(args, "seeds", 2) or 2, fixed_seed=getattr(args, "seed", None),
                 timeout_s=getattr(args, "timeout", 600.0) or 600.0)
    gen, problem = (None, None)
    if kw.pop("want_generator", False):
        gen, problem = generator(args)
    b = budget(args, gen) if gen is not None else None
    return Context(project, store(project), generator=gen, generator_problem=problem,
                   settings=s, budget=b, **kw)


def progress(args, total: int):
    """The progress display on stderr (regen/progress.py); use it as a context manager."""
    from ..progress import for_command

    return for_command(total, as_json=getattr(args, "json", False))


def kernels(args):
    return args.kernels or None


def targets(args):
    return args.target or None


# -- options ---------------------------------------------------------------------------------------
def add_selection(parser, kernels: bool = True, json_help: str = "machine-readable output") -> None:
    if kernels:
        parser.add_argument("kernels", nargs="*", metavar="KERNEL",
                            help="kernels to act on (default: every kernel)")
    parser.add_argument("--target", "-t", action="append", metavar="T",
                        help="target column, repeatable (default: every target)")
    parser.add_argument("--json", action="store_true", help=json_help)


def add_node(parser) -> None:
    """One (kernel, target) node."""
    parser.add_argument("kernel", help="the kernel (a spec name in specs/)")
    parser.add_argument("--target", "-t", required=True, help="the target column (a name in targets/)")


def add_verbose(parser) -> None:
    parser.add_argument("--verbose", "-v", action="store_true",
                        help="also print each node's reasons, evidence and per-variant resource table")


def add_generator(parser) -> None:
    parser.add_argument("--generator", metavar="G",
                        help="llm (Anthropic API) | openai (an OpenAI-compatible server) | "
                             "command:CMD | none (default: $REGEN_GENERATOR, else llm if "
                             "ANTHROPIC_API_KEY is set, else none)")
    parser.add_argument("--model", help="model id (default: $REGEN_LLM_MODEL, else for llm "
                                        "claude-sonnet-5-5; openai needs one)")
    parser.add_argument("--base-url", metavar="URL",
                        help="the API's address (default: $ANTHROPIC_BASE_URL for llm, "
                             "$OPENAI_BASE_URL for openai, else the vendor's own)")
    parser.add_argument("--max-candidates", type=int, default=8, metavar="N",
                        help="candidates per node the search may try")
    parser.add_argument("--repair-rounds", type=int, default=3, metavar="N",
                        help="repairs of one candidate after a compile or oracle failure")
    parser.add_argument("--max-usd", type=float, metavar="USD",
                        help="spending limit per node, a hard one: no call is made that could "
                             f"exceed it (default: {DEFAULT_MAX_USD:g} for a model with a known "
                             "price; for a model without one, spending is not limited and a "
                             "warning says so)")
    parser.add_argument("--max-seconds", type=float, default=1800.0, metavar="S",
                        help="time limit per node, generator calls included (they time out "
                             "when it runs out)")


def add_verify(parser) -> None:
    parser.add_argument("--seeds", type=int, default=2, metavar="N",
                        help="fresh seeds per correctness case")
    parser.add_argument("--seed", type=int,
                        help="fix the seed to reproduce a failure (default: fresh seeds)")
    parser.add_argument("--timeout", type=float, default=600.0, metavar="S",
                        help="seconds per child process")


def add_remote(parser) -> None:
    parser.add_argument("--remote", metavar="URL",
                        help="the remote cache, any fsspec URL: s3://bucket/prefix, file:///path, "
                             "memory://name (default: $REGEN_REMOTE, else [tool.regen] remote in "
                             "regen.toml or pyproject.toml, else none)")
    parser.add_argument("--no-remote", action="store_true", help="use no remote cache")
    parser.add_argument("--trust", metavar="POLICY",
                        help="which remote records count: `any` (default), or a file of trusted "
                             "ed25519 public keys (only records they signed; $REGEN_TRUST, "
                             "[tool.regen] trust)")


def sync(args, project):
    """The remote cache's pull/push (regen/remote/), or None when none is configured."""
    from ..remote import remote_config

    config = remote_config(project.root, getattr(args, "remote", None), getattr(args, "trust", None),
                           getattr(args, "no_remote", False))
    if config.url is None:
        return None
    from ..remote.sync import Sync

    return Sync(config)


def pull(args, project, sync_, store_=None) -> None:
    """Pull before planning, one line on stderr saying what came (and what was refused)."""
    import sys

    if sync_ is None:
        return
    from ..remote.objects import RemoteError

    try:
        report = sync_.pull(project, store_ or store(project), kernels(args), targets(args))
    except RemoteError as exc:
        print(f"regen: remote: {exc}; going on with the local cache", file=sys.stderr)
        return
    print(f"regen: remote {sync_.remote.url}: {report.line('pulled')}", file=sys.stderr)


def add_executor(parser) -> None:
    parser.add_argument("--executor", choices=("local", "ray"), default="local",
                        help="where verification runs: this machine (default: local), or a Ray "
                             "cluster whose workers offer each column's hardware (`regen worker`)")
    parser.add_argument("--address", metavar="ADDR",
                        help="--executor ray: the cluster (default: $RAY_ADDRESS, else the one "
                             "`ray start --head` started on this machine)")
    if not any(a.dest == "jobs" for a in parser._actions):
        parser.add_argument("--jobs", "-j", type=int, default=1, metavar="N",
                            help="nodes at once (default: 1; with --executor ray, one per worker "
                                 "slot)")


def executor(args, project):
    """The executor (regen/executors/) the arguments ask for; local by default."""
    from ..executors import make

    if args.executor != "ray" and args.address:
        raise InputError("--address needs --executor ray", field="--address")
    return make(args.executor, args.address, project)
