"""Dataset building (joins, filters, target) and the feature-engineering transformer used in every Pipeline."""
