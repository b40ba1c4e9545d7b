"""Reading runs back from MLflow for reports, plots and predictions."""
