"""asaptrace.replay.mechanics: how a deployment executes work, with no policy in it.

Modules, in the order data flows through them:

* :mod:`~asaptrace.replay.mechanics.work` — the replay's input as types (``MeasuredWork``,
  ``StepChain``, ``ChainKernels``); :mod:`asaptrace.replay.whatif.measured` fills them from a store;
* :mod:`~asaptrace.replay.mechanics.deployment` — ``Deployment``: the simulated devices (attention
  groups × TP plus expert dies);
* :mod:`~asaptrace.replay.mechanics.planner` — the batch planner (FIFO admission, longest-first
  balancing), also synth's;
* :mod:`~asaptrace.replay.mechanics.program` — the coupled step as a kernel program
  (``coupled_program``), the chain synth's coupled traces are timed on;
* :mod:`~asaptrace.replay.mechanics.lockstep` — coupled mechanics (``run_chain``,
  ``chain_from_costs``, ``chain_from_costs_two_mb``, their ``KernelDeps``), vectorised over ranks;
* :mod:`~asaptrace.replay.mechanics.engine` — the one event engine (``Engine``, ``Event``);
* :mod:`~asaptrace.replay.mechanics.formers` — what a batch is and how formers hand batches out
  (``Batch``, the ``BatchFormer`` hook, ``StaticBatches``, ``FifoBatches``, ``batch_costs``);
* :mod:`~asaptrace.replay.mechanics.offline` — a measured batch's costs on another deployment;
* :mod:`~asaptrace.replay.mechanics.pipelined` — disaggregated mechanics on the engine: the
  pipeline's events and its Python reference (``Pipeline``, ``PipelineConfig``, ``PipelineTrace``,
  ``ServiceOrder``);
* :mod:`~asaptrace.replay.mechanics.pipeline_run` — ``run_pipeline`` / ``run_recorded``: the
  reference or the compiled item loop ``_pkernel`` (``_pkernel.c``, same events span for span;
  ``ASAPTRACE_PIPELINE_ENGINE=python`` picks the reference);
* :mod:`~asaptrace.replay.mechanics.lockstep_run` — the lockstep family's online loop in the
  compiled ``_lkernel`` (``_lkernel.c``: the built-in step formers, the same steps as the Python
  loop; the same variable picks the Python loop).
"""
