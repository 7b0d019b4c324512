"""What a machine is: GPU and system specs, loaded from TOML profiles."""
