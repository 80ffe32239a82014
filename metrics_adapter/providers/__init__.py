"""What answers the metrics APIs: the provider protocol, a fake for tests, scraped pods, sizing."""
