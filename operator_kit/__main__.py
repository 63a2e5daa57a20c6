"""``python -m operator_kit [MODULE:ATTR] [flags]``: run an Operator's own command line.

The Operator is the one ``MODULE:ATTR`` names, else ``$OPERATOR_KIT_APP`` (the variable
gunicorn reads too); the flags are its command line's (`Operator.main`,
`operator_kit.cli`): the controllers, the probes and the metrics on ports of their own,
until SIGTERM or SIGINT. The generated Deployment of an operator that serves no webhooks
runs this (`operator_kit.manifests`), so the image needs no entry point of its own.
"""

from __future__ import annotations

import os
import sys

from operator_kit.operator import Operator
from operator_kit.webhooks.loader import APP_ENV, import_target

_PROG = "python -m operator_kit"
_USAGE = (f"usage: {_PROG} [MODULE:ATTR] [flags]\n\n"
          f"Run the Operator MODULE:ATTR names (default: ${APP_ENV}) through its own command "
          f"line; {_PROG} MODULE:ATTR --help lists its flags.\n")


def main(argv: list[str] | None = None) -> int:
    """Load the Operator and run its command line with the remaining arguments."""
    args = list(sys.argv[1:] if argv is None else argv)
    app, named_by = os.environ.get(APP_ENV, ""), APP_ENV
    if args and not args[0].startswith("-"):
        app, named_by = args.pop(0), "MODULE:ATTR"
    if not app:
        if args[:1] in (["-h"], ["--help"]):
            sys.stdout.write(_USAGE)
            return 0
        print(f"{_PROG}: error: name the Operator to run: {_PROG} MODULE:ATTR, or set "
              f"{APP_ENV}=MODULE:ATTR (for example backup_operator:operator)", file=sys.stderr)
        return 2
    try:
        target = import_target(app, named_by=named_by)
    except RuntimeError as err:
        print(f"{_PROG}: error: {err}", file=sys.stderr)
        return 2
    if not isinstance(target, Operator):
        print(f"{_PROG}: error: {app} is a {type(target).__name__}, not an "
              "operator_kit.Operator", file=sys.stderr)
        return 2
    if "--manifests" in args:  # the app is known here, not to the command line
        from operator_kit.manifests._command import run

        return run(args[args.index("--manifests") + 1:], operator=target, app=app,
                   prog=f"{_PROG} {app} --manifests")
    from operator_kit.cli import main as command_line

    return command_line(target, args, app=app)  # its name and version are the app's


if __name__ == "__main__":
    sys.exit(main())
