"""kafkalab."""
