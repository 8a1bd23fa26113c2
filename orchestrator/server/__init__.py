"""The campaign service (`paratune server`): a queue, an HTTP API and a web page over many
campaigns. It runs each admitted campaign's controller as a supervised child process and reads
campaign views; it never schedules trials itself (see ARCHITECTURE.md)."""
