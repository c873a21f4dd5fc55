"""The inference engine: sequences, block manager, scheduler, model runner, engine loop."""
