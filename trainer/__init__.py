"""A host's side of veriloco: model, data, the one training step, the DiLoCo inner and outer loops."""
