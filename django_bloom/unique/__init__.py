"""The unique-field feature: the validator, normalisers, binding a filter to a model field."""
