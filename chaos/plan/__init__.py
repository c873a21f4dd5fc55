"""The seed's test plan as commands: the concurrency gradient (`chaos sweep`), the search for the breaking point
and the instances it takes (`chaos capacity`), and targets side by side (`chaos compare`). docs/plan.md."""
