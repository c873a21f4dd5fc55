"""Load without faults, as commands: one load (`chaos load`, loadcli.py), a log replayed (`chaos replay`,
replaycli.py), the seed's concurrency gradient (`chaos sweep`), the search for the breaking point and the instances it
takes (`chaos capacity`), and targets side by side (`chaos compare`); reach.py starts or reaches the target each of them
drives. docs/plan.md."""
