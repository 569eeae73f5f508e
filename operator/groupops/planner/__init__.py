"""The planner: pure decisions between the lag sources and the controller.

Stage: after the lag source, before the controller's apply steps. The controller hands it the
policy's strategy, the topics' partition counts, the taking-part identities, the published plan
and the lag; it returns the target assignment (through `groupops.assign`), whether a rebalance is
due and why, and the plan's wire format (the ConfigMap every consumer watches, the Lease it acks
on), which the consumer runtime reads with the same functions.

Modules: `target` (policy + lag + identities -> target assignment, move budget, triggers),
`wire` (names and encodings shared by the operator and the consumer runtime), `handoff` (the
two-epoch fenced diff: from the published plan and the acknowledgements to the next plan).
Pure: no Kubernetes, Kafka or I/O; import-linter keeps it so.
"""
