"""Configuration: validation of a config file, and what each rule passes its script."""
