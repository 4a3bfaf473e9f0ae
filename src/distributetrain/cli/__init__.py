"""The `distributetrain` command line: a click group whose commands live in one module per concern.

Each submodule defines `register(group)`; this module maps our errors to exit codes once, for all of them.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import click

from distributetrain import __version__
from distributetrain.errors import EXIT_CODES, DistributeTrainError

EXIT_CODES_HELP = "\b\nExit codes:\n" + "\n".join(f"  {code:<9} {meaning}" for code, meaning in EXIT_CODES)


class _Group(click.Group):
    """Maps DistributeTrainError to its exit code with a one-line message instead of a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except DistributeTrainError as err:
            click.echo(f"error: {err}", err=True)
            sys.exit(err.exit_code)


@click.group(cls=_Group, epilog=EXIT_CODES_HELP, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="distributetrain")
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
def main(verbose: int) -> None:
    """Run Horovod data-parallel training on a Kubernetes GPU cluster, without an operator.

    \b
    Typical use:
      distributetrain inventory                 # free GPUs per node, and why a node is excluded
      distributetrain plan --gpus 6             # preview the placement, create nothing
    """
    level = logging.WARNING - 10 * verbose
    logging.basicConfig(level=max(level, logging.DEBUG),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def _register_all() -> None:
    from distributetrain.cli import job, plan

    for module in (plan, job):
        module.register(main)


_register_all()


def manager_main() -> None:
    """Entry point of `distributetrain-manager`: the `run` command, as Manager.sh calls it."""
    main(["run", *sys.argv[1:]])
