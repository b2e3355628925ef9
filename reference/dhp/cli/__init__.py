"""The command-line tools (`dhp`, `dhp-transport`) and the demo."""
