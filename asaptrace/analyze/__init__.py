"""Pure analyses of an enriched store's tables, and the Diagnosis that gathers them (see DESIGN.md).

Modules, in the order data flows through them:

* ``barrier`` — who waited on whom, at which collective instance, for how long;
* ``breakdown`` — each rank's step time in windows that tile its device time: compute, copy,
  exposed transfer, exposed wait, idle by cause (``_idle``: host launch, synchronisation, other);
* ``overlap`` — compute/communication overlap per device (on ``_coverage``, a line sweep);
* ``imbalance`` — DP groups' unequal work per step, and whether Σs² explains the wait;
* ``straggler`` — who arrives last, how often, device or load;
* ``ttft`` — each request's time to first token, split by cause;
* ``critical`` — the path that set each step, across ranks (graph in ``_cp_graph``, walk and
  what-if re-walks in ``_cp_walk``);
* ``in_flight`` — in-flight MoE items on a disaggregated pool (a counter track);
* ``diagnosis`` — every table above for one store; ``findings`` (with ``_findings_overlap``,
  ``_findings_idle`` and ``_findings_evidence``, which drops cross-rank findings to info on an
  unreliable clock alignment) — the tables as ranked sentences;
* ``compare`` — two Diagnoses side by side; ``gate`` — thresholds on the comparison, judged
  against the steps' noise (the regression gate); ``_common`` — small shared pieces.
"""
