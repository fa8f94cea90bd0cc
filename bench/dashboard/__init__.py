"""The benchmark dashboard behind bench/run_all.py: machine and peer description, the
JSON/Markdown report, the charts and the history over past runs. These modules work on
plain dicts (the JSON schema), so they import nothing from the bench scripts."""
