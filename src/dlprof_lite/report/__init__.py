"""Stage 4, report: tables, advice, CSV/JSON files and the console summary from a Profile."""
