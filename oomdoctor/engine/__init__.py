"""Rules as data: YAML rule files, their schema and loader, the engine that ranks diagnoses, and `oomdoctor rules`."""
