"""spark-submit application: `groupops pipeline` alone, for a Spark cluster's own launcher.

    spark-submit --master URL [--packages ...] \
        $(python -c 'import groupops.commands.spark_submit as m; print(m.__file__)') \
        forecast --input kafka://groupops-snapshots --bootstrap-server kafka:9092 --out /data/pipeline

The master is spark-submit's unless --master is given (docs/pipeline.md).
"""

import sys

# Run as a script, this file's directory comes first on sys.path, and its sibling `operator.py`
# would shadow the standard library's `operator` (imported by typing); drop it before any import.
if __name__ == "__main__" and sys.path and sys.path[0] == __file__.rpartition("/")[0]:
    del sys.path[0]

import typer

from groupops.commands.pipeline import pipeline_command

if __name__ == "__main__":
    typer.run(pipeline_command)
