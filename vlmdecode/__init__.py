"""vlmdecode."""
