"""``asaptrace policies``: the one policy registry — what ``replay --policy`` and ``sweep --policies`` take."""

from __future__ import annotations

from asaptrace.cli._common import JsonOpt, out, print_json, user_errors
from asaptrace.cli._layout import print_hanging


@user_errors
def policies(as_json: JsonOpt = False) -> None:
    """List every registered policy: offline (replay) and online (sweep), named ablations, parameters.

    Example: asaptrace policies --json
    """
    from asaptrace.pipeline import policy_catalogue
    from asaptrace.views.store import policies_lines

    catalogue = policy_catalogue()
    if as_json:
        print_json({"policies": catalogue})
        return
    for line in policies_lines(catalogue):
        print_hanging(out, line)
