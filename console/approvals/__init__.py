"""Server-rendered pages for people (the approval queue), outside the Django admin."""
