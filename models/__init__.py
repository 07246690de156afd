"""The models a run trains (the zoo, user models, the recommenders), their inputs against the data, their checkpoints
and the export check."""
