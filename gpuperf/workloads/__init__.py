"""What is run: model configs, presets, scenarios, and the op list they make."""
