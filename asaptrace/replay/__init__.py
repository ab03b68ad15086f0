"""asaptrace.replay: re-run a store's measured work under other runtime semantics, offline and online
(docs/analyses/replay.md, docs/sweep.md).

Rooms, bottom to top (a room imports only from rooms below it; the import-linter contract "replay
rooms" in pyproject.toml keeps it so), in the order data flows through them:

* :mod:`~asaptrace.replay.costs` — ``CostModel`` (DOMAIN §3/§6 defaults, the one TP rule), the
  registry of cost parts and ``layer_costs`` (the one place a layer's parts are composed),
  ``fit_costs``, ``load_costs`` / ``save_costs`` (strict TOML). *A new cost part goes here: its
  fit + one ``register_part``.*
  Beside it :mod:`~asaptrace.replay.dispersion`: per-die noise, the expected slowest of k dies;
  :mod:`~asaptrace.replay.contention`: link contention, transfers in flight and the fitted κ.
* :mod:`~asaptrace.replay.mechanics` — how a deployment executes work: the event engine, the
  lockstep chain, the pipelined deployment (Python reference and compiled item loop), batch
  formers, the planner, the measured work's types.
* :mod:`~asaptrace.replay.serving` — the online serving model: requests and arrivals, the
  scenario and its TOMLs, each mechanics' serving rule (an online batch former), capacity bounds.
  *A new serving rule goes here.*
* :mod:`~asaptrace.replay.policies` — the one ``POLICIES`` registry; each policy its parameters,
  ``run()`` (offline) and ``serve()`` (online) hooks. *A new policy goes here (module + one line).*
* :mod:`~asaptrace.replay.whatif` — the questions asked of the policies: a store's measured work
  extracted and replayed (``ReplayResult``), its explorations (``--split auto``, ``--vary``) and
  replayed store; the online simulation, the SLO sweep, its result and its sensitivity.
"""
