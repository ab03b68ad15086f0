"""asaptrace.replay.whatif: the questions asked of the policies, offline (a store's run replayed)
and online (requests served at rising rates); their words are :mod:`asaptrace.questions`.

Modules, in the order data flows through them:

* :mod:`~asaptrace.replay.whatif.measured` — ``extract_measured_work(store) -> MeasuredWork``: what
  the run did, wait removed (chains of collective instances, per-layer items, pool and transfers);
* :mod:`~asaptrace.replay.whatif.measured_pool` — its pool: each served item's slowest expert die
  and the dies' noise, per (step, layer, micro-batch);
* :mod:`~asaptrace.replay.whatif.run` — ``replay_measured_work(wl, policy, ...) -> ReplayResult``
  (+ JSON); the pipeline's ``replay_store`` composes them: extract, fit the costs, explore, replay,
  write;
* :mod:`~asaptrace.replay.whatif.model_error` — the measured deployment modelled back from the
  fitted costs against the run: how far the model was from it (``model_error``);
* :mod:`~asaptrace.replay.whatif.validate` — fit on one store, predict another's deployment, the
  error and band per step, per layer and overall (``asaptrace validate``);
* :mod:`~asaptrace.replay.whatif.explore` — around one what-if: the best split (``--split auto``)
  and the answer's range (``--vary``), ``explore_whatif(...) -> Exploration`` (no writing);
* :mod:`~asaptrace.replay.whatif.replayed_store` — a replay drawn as canonical store tables;
* :mod:`~asaptrace.replay.whatif.simulate` — online serving of one policy at one rate (a request
  stream through the policy's ``serve()``), each TTFT explained;
* :mod:`~asaptrace.replay.whatif.sweep_point` — one curve point's numbers: TTFT and its
  decomposition, overall and by prompt length;
* :mod:`~asaptrace.replay.whatif.sweep_result` — ``SweepResult``, its versioned JSON;
* :mod:`~asaptrace.replay.whatif.sweep_reading` — a sweep's words: where its costs came from, its
  plain reading beside the paper's numbers;
* :mod:`~asaptrace.replay.whatif.sweep_grid` — where an SLO search starts: each policy's grid of
  rates, walked from near its bound up and down to a bracket;
* :mod:`~asaptrace.replay.whatif.sweep` — the SLO sweep: rate → TTFT curves and SLO-compliant
  throughput per policy;
* :mod:`~asaptrace.replay.whatif.sweep_near` — the SLO search started from a known answer (the
  cost-fit band's two ends of ``advise --online``);
* :mod:`~asaptrace.replay.whatif.sensitivity` — how far to trust a sweep: the tornado
  (``--vary``) and calibration to one point.
"""
