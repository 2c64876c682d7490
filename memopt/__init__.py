import memopt
