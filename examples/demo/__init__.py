"""`make demo`: EDL's whole loop on one machine, no cluster.

A job grows into freed capacity, shrinks for a higher-priority arrival and loses nothing:

* :mod:`.cluster` a simulated node of 3 CPU slots, the trainer Deployment's pods (ReplicaSet
  rules) and other work, a scheduler that binds by priority; it writes the files the adapter
  reads;
* :mod:`.control` the real ``edl-adapter`` with its sizer on that capacity file, and the HPA
  model (``edl_sim.hpa``) reading ``desired_replicas`` over HTTPS every sync;
* :mod:`.kubelet` one ``edl-agent run --elastic`` process per bound pod (local membership,
  in-process re-init);
* :mod:`.story` the scripted acts, each waiting on what the job has done;
* :mod:`.telemetry` the world record and the agents' metrics; :mod:`.view` the live panel or
  plain lines; :mod:`.report` the summary (ledger, one-process reference) and the PNG;
* :mod:`.processes` every child in its own session, a subreaper and a parent-death signal:
  no process outlives the demo; :mod:`.run` one run, tick by tick; :mod:`.cli` the options.

It is a package rather than one file because each part has one job and the unit tests take
them one at a time (``tests/unit/examples/demo``); ``make demo-cluster`` (:mod:`.on_cluster`)
replays the same story on the e2e harness's real control plane and three real kubelet nodes
(:mod:`.nodes`; :mod:`.pod_logs` keeps the trainers' logs after their pods).
"""
