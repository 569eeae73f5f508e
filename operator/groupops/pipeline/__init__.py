"""The PySpark pipeline: offset snapshots → rates, time lag, forecasts, cluster-wide plans and a
strategy backtest report (docs/design.md §10; docs/pipeline.md).

Layout: one module per transform (`rates`, `timelag`, `forecast`, `plan`, `backtest`, `report`),
each a set of DataFrame → DataFrame functions; `schema` is the snapshot record, `snapshot` captures
it and appends it to Parquet or Kafka (no Spark), `session` builds the SparkSession, `io` reads
snapshots and writes outputs, `jobs` is the entry point of every job (the only place with a session
and sinks), `synthetic` makes histories with known answers. Imports groupops.assign (the pure
engine) and groupops.lag; nothing below imports this package.

Importing the package itself loads nothing heavy; import the module you need.
"""
