"""From diagnosis to advice: every finding paired with the what-if that would fix it.

The diagnosis (:mod:`asaptrace.analyze`) says where time goes; the replay (:mod:`asaptrace.replay`)
says what a change would win back. :func:`advise` joins them for one store: it runs the what-ifs
that apply to its deployment (:mod:`asaptrace.advise.candidates`), each at its best setting, with
the range of its recovered time over what the store cannot pin and the quality of the cost fit it
rests on, and ranks them; :mod:`asaptrace.advise.advice` holds the typed, versioned result and the
one wording every face shows. docs/analyses/advise.md documents the rules and the JSON.
"""

from asaptrace.advise.advice import Advice, WhatIf
from asaptrace.advise.candidates import advise

__all__ = ["Advice", "WhatIf", "advise"]
