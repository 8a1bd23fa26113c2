"""Reports and views of campaign results."""
