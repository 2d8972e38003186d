"""Benchmarks of the engine on a real PostgreSQL: ``agentflow bench``.

Every figure is measured on one database together with its *floor*, the cost of one
``INSERT ...; COMMIT`` round trip on that same database, so results from different machines
can be compared as ratios. Modules:

- ``database``: a fresh embedded server (or a fresh database on ``AGENTFLOW_DATABASE_URL``);
- ``context``: sizes, the inputs every workload gets, workflow shapes, starting runs;
- ``floor``: the commit floor;
- ``stats``: percentiles;
- ``processes``: ``agentflow worker`` subprocesses and their memory;
- ``agent_worker``: A1's worker process, ``agentflow worker`` with a scripted model;
- ``server``: an ``agentflow serve`` subprocess for the HTTP workloads;
- ``queries``: the benchmark's own measurement SQL (DB-clock timestamps);
- ``throughput`` (W1), ``latency`` (W2, W3), ``sleep`` (W4, W4-10k): the run workloads;
- ``ingest`` (E1), ``event_latency`` (E2), ``dispatch`` (E3): the event workloads;
- ``agent_steps`` (A1): agent runs, decide and act steps on a scripted model;
- ``report``: figures, targets, the Rich table and the JSON document;
- ``runner``: runs the selected workloads;
- ``tools``: the trivial tool the workloads' steps call.
"""
