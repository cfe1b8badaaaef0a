"""The idle partition: why each device waits and where the main thread's step goes
(rules/idle.py names the causes)."""
