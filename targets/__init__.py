"""Device target profiles (data): one JSON file per device class."""
