"""groupops: Kafka consumer-group operations controller for Kubernetes."""

__version__ = "0.1.0"
