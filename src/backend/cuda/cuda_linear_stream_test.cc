// Placeholder: filled in this session (issue 9).
