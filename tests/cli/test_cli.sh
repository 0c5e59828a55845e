echo "placeholder"
