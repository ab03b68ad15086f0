"""asaptrace.replay: re-run a store's measured work under other runtime semantics (docs/analyses/replay.md).

Modules, in the order data flows through them:

* :mod:`~asaptrace.replay.mechanics.measured` — ``extract_measured_work(store) -> MeasuredWork``: what the run did,
  wait removed (chains of collective instances, per-layer items, pool and transfer times);
* :mod:`~asaptrace.replay.costs` — ``CostModel`` (DOMAIN §3/§6 defaults), ``fit_costs``,
  ``load_costs`` / ``save_costs`` (strict TOML);
* :mod:`~asaptrace.replay.mechanics.engine` — the one event engine (``Engine``, ``Event``);
* :mod:`~asaptrace.replay.mechanics.lockstep` — coupled mechanics (``run_chain``, ``chain_from_costs``,
  ``chain_from_costs_two_mb``, their ``KernelDeps``), vectorised over ranks;
* :mod:`~asaptrace.replay.mechanics.program` — the coupled step as a kernel program (``coupled_program``),
  the chain synth's coupled traces are timed on;
* :mod:`~asaptrace.replay.mechanics.pipelined` — disaggregated mechanics on the engine (``run_pipeline``,
  ``PipelineConfig``, the ``BatchFormer`` hook, ``StaticBatches``, ``batch_costs``); its item loop
  also compiled (``_pkernel.c``), the Python engine kept as the reference;
* :mod:`~asaptrace.replay.mechanics.planner` — the batch planner (FIFO admission, longest-first balancing);
* :mod:`~asaptrace.replay.mechanics.offline` — a measured batch's costs on another deployment;
* :mod:`~asaptrace.replay.policies` — ``POLICIES`` registry: coupled, asap, balanced,
  afd-pingpong, chunked;
* :mod:`~asaptrace.replay.whatif.replayed_store` — a replay drawn as canonical store tables;
* :mod:`~asaptrace.replay.whatif.run` — ``replay_measured_work(wl, policy, ...) -> ReplayResult`` (+ JSON); the pipeline's ``replay_store`` opens, extracts, replays and writes.
"""
