"""asaptrace.replay.serving: the online serving model — what arrives, under which scenario, and
how much a deployment can sustain. No per-policy code: each policy's online former lives in its
own module (:mod:`asaptrace.replay.policies`).

Modules, in the order data flows through them:

* :mod:`~asaptrace.replay.serving.requests` — ``ServingRequests`` in, ``ServingResult`` out (the
  TTFT identity check);
* :mod:`~asaptrace.replay.serving.lengths_fit` — the paper's prompt lengths (a log-logistic fitted
  to its four facts);
* :mod:`~asaptrace.replay.serving.scenario` — a scenario (workload, cost and SLO knobs) from
  ``scenarios/*.toml`` package data; the one table of knob spellings (``KNOB_ALIASES``);
* :mod:`~asaptrace.replay.serving.arrivals` — request streams with common random numbers across
  rates (Poisson, a store's requests, a trace file's);
* :mod:`~asaptrace.replay.serving.capacity` — capacity bounds (the highest sustainable rate);
* :mod:`~asaptrace.replay.serving.steady` — the steady state every face judges by: how long a
  rate's run lasts, whether its backlog grows, the one rule of SLO compliance (``meets_slo``).

A policy's ``serve()`` (:mod:`asaptrace.replay.policies`) runs its online former on its family's
loop over these requests and scenario; the sweep (:mod:`asaptrace.replay.whatif`) calls the policies.
"""
