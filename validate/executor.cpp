// placeholder: filled in by issue 5 work in progress
