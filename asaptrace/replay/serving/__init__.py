"""asaptrace.replay.serving: the online serving model — what arrives, under which scenario, and
how each mechanics forms and times batches of arrived requests (a serving rule).

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
  rate's run lasts, whether its backlog grows, the one rule of SLO compliance (``meets_slo``);
* :mod:`~asaptrace.replay.serving.policy_settings` — what a serving rule reads of its policy, as
  protocols (serving imports no policy);
* :mod:`~asaptrace.replay.serving.lockstep_serving` — coupled, balanced and chunked prefill:
  lockstep steps on the coupled deployment;
* :mod:`~asaptrace.replay.serving.asap_serving` — ASAP: an online former on the pipelined
  mechanics (``OnlineFormer``, ``serve_on_pipeline``);
* :mod:`~asaptrace.replay.serving.afd_serving` — AFD ping-pong, on the same pipeline.

A policy's ``serve()`` hook (:mod:`asaptrace.replay.policies`) calls its serving rule; the sweep
(:mod:`asaptrace.replay.whatif`) calls the policies.
"""
