"""The run store: every analysed report recorded through SQLAlchemy (stage after report)."""
