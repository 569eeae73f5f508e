"""One module per `groupops` command; each exposes `register(app)`."""
